"""What the probes saw can refuse a layer (docs/census.md, "Refusals"): tokens of the decoder's own
beside the sequence's, a layer that ran no kernel or only one of a hybrid's mixers, selective
scans of different shapes, cross-attention where the layer attends over its own tokens, and
appended keys that are not one per a whole number of tokens or do not scale with the sequence.
"""

from __future__ import annotations

from collections.abc import Mapping

from speccat.census.describe.layer_view import LayerView
from speccat.census.measure.layer_probe import LayerProbe
from speccat.census.spec import SpecError


def check_tokens(probes: Mapping[int, LayerProbe], seq_length: int) -> None:
    """Refuse a decoder that hands its layers another number of tokens than it was given
    (cpmant's prepends prompt tokens of its own, prophetnet's appends a stream per predicted
    token): the census states bytes per token of the sequence, measured at one sequence length."""
    for index, probe in probes.items():
        if probe.ran and probe.hidden_dims and seq_length not in probe.hidden_dims:
            raise SpecError(
                "unsupported_layer",
                f"layer {index}: its hidden states {probe.hidden_dims} (before the width) have no dim of the {seq_length} tokens the decoder is given: "
                "the decoder runs its layers over tokens of its own beside the sequence's (a prompt, n-gram streams), which bytes per token of the sequence do not state",
            )


def check_probes(views: list[LayerView]) -> None:
    """What the probes saw can refuse too: a layer that ran no kernel, non-causal or cross-attention."""
    for v in views:
        if not v.probe.kernels and v.shape.mixer != "none":
            raise SpecError(
                "unsupported_layer",
                f"layer {v.index} ({type(v.layer).__name__}): ran no attention kernel on a plain causal input "
                "(a cross-attention layer skips without encoder states)",
            )
        if v.shape.mixer.startswith("full_") and not (v.attention_kernels() and (v.scan_kernels() or v.ssd_kernels())):
            raise SpecError(
                "unsupported_layer",
                f"layer {v.index} ({type(v.layer).__name__}): holds attention beside a state-space mixer, but only one of them ran on a plain causal input",
            )
        if len({(k.child, k["u"], k["A"]) for k in v.scan_kernels() if k.apart}) > 1:
            raise SpecError(
                "unsupported_layer",
                f"layer {v.index} ({type(v.layer).__name__}): selective scans of different shapes or in different children in one layer; "
                "the census states one Mamba mixer's scans, one per Mamba head alike",
            )
        for k in v.attention_kernels():
            # keys appended to the layer's own tokens, fewer than them (compressed entries), are
            # priced per token (keys_appended_every); any other difference is cross-attention
            appended = k["q"][2] in v.probe.hidden_dims and 0 < k["k"][2] - k["q"][2] < k["q"][2]
            if k["q"][2] != k["k"][2] and v.shape.mixer != "cross" and not appended:  # bidirectional self-attention (a BERT built as a causal LM without is_decoder) keeps what causal does
                raise SpecError("unsupported_layer", f"layer {v.index} ({type(v.layer).__name__}): cross-attention (queries {k['q'][2]}, keys {k['k'][2]})")
        v.keys_appended_every()  # refuses appended keys that are not one per a whole number of tokens


def check_appended_keys(plain: LayerView, other: LayerView, length: int) -> None:
    """Refuse keys appended to the layer's own that do not scale with the sequence: `other` is
    the same layer probed at another length, which must append one key per as many tokens."""
    at_census, at_length = plain.keys_appended_every(), other.keys_appended_every()
    if at_census != at_length:
        raise SpecError(
            "unsupported_layer",
            f"layer {plain.index} ({type(plain.layer).__name__}): the keys appended to its own are one per {at_census} tokens at the census's "
            f"length and one per {at_length} at {length} tokens: they do not scale with the sequence, which bytes per token do not state",
        )
