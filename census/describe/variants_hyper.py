"""The variant facts of hyper-connections (hy_v4's, deepseek_v4's; docs/census.md, "Variant
facts"): the decoder hands each layer several copies of the hidden stream, hidden states of dims
(batch, tokens, streams, width); children of the layer that are neither its attention nor its
feed-forward (the stream mixers: hy_v4's attn_hc and ffn_hc) collapse them into each block's
input, and the layer's own code expands each block's output back to the streams. What they keep
is read off where each kept storage was made and saved and how many elements a token it holds
(census/measure/stream_kept.py, LayerProbe.stream_kept), counted in tensors of the widths the
records price them at. Each reader is registered with `@variant`; its docstring is what
docs/census.md's table says it is read from.
"""

from __future__ import annotations

import math

import torch

from speccat.census.describe.layer_roles import HALF, LayerRoles
from speccat.census.describe.variant_registry import variant
from speccat.census.structure.predicates import is_norm


def _streams(view: LayerRoles) -> int:
    """The copies of the stream each token carries into the layer: the hidden states' dims after
    the tokens' (census/measure/watcher.py tokens_of); 0 for one stream."""
    tokens = view.probe.tokens
    streams = math.prod(view.probe.hidden_dims) // tokens if tokens else 0
    return streams if streams > 1 else 0


def _mixers(view: LayerRoles) -> set[str]:
    """The stream mixers: top-level children of a layer given several streams that ran and kept
    storages booked to themselves, neither its attention's, its feed-forward's nor a norm."""
    if not _streams(view):
        return set()
    roles = view.mixer_children | view.ffn_children | view.side_children
    booked = {op.removeprefix("child:") for op, *_ in view.probe.stream_kept if op.startswith("child:")}
    return {name for name, module in view.children() if name in booked and name not in roles and not is_norm(module)}


def _elements(view: LayerRoles, keep) -> int:
    """Elements per token of the storages (LayerProbe.stream_kept) that `keep(op, made_in,
    saved_in, dtype, wide)` accepts."""
    return sum(n for key, n in view.probe.stream_kept.items() if keep(*key))


@variant
def hc_streams(view: LayerRoles, top_k: int | None) -> int:
    """The dims of the hidden states the layer was called with after the tokens' (before the
    width): the streams of each token (hy_v4's and deepseek_v4's `hc_mult`, 4); 0 for hidden
    states of one stream."""
    return _streams(view)


@variant
def hc_mixers(view: LayerRoles, top_k: int | None) -> int:
    """The layer's top-level children, in a layer called with several streams, that ran and kept
    storages of their own booked to them, and hold no attention kernel, no projection module or
    experts and are no norm (hy_v4's attn_hc and ffn_hc: 2); 0 without streams."""
    return len(_mixers(view))


def _wide(view: LayerRoles, dtypes: tuple[torch.dtype, ...]) -> int:
    """Tensors of every stream's width (streams × hidden) a stream mixer keeps, booked to it, in
    one of `dtypes`, per mixer."""
    mixers, streams = _mixers(view), _streams(view)
    if not mixers:
        return 0
    ops = {f"child:{name}" for name in mixers}
    kept = _elements(view, lambda op, made, saved, dtype, wide: op in ops and dtype in dtypes and wide)
    return kept // (streams * view.hidden * len(mixers))


@variant
def hc_wide_fp32(view: LayerRoles, top_k: int | None) -> int:
    """The fp32 storages of a stream mixer holding streams × hidden elements a token, booked to
    it (LayerProbe.stream_kept), over the mixers' width: tensors of every stream per mixer (hy_v4's
    flattened streams cast to fp32, kept by its mixing linear and its norm: 1); 0 without."""
    return _wide(view, (torch.float32,))


@variant
def hc_wide_half(view: LayerRoles, top_k: int | None) -> int:
    """The same in the compute dtype (hy_v4's streams as given, kept by the product collapsing
    them with the pre weights: 1)."""
    return _wide(view, HALF)


@variant
def hc_narrow_fp32(view: LayerRoles, top_k: int | None) -> int:
    """The fp32 elements a token of the storages narrower than the hidden width that a stream
    mixer made and that are kept outside a norm, by it or by the layer's own code, per mixer and
    stream (hy_v4's: the mixing linear's output and the mixes, 2 each, the pre and post
    sigmoids' outputs, the pre weights the collapse keeps and the post weights the expansion
    keeps, 1 each: 8); 0 without."""
    mixers, streams = _mixers(view), _streams(view)
    if not mixers:
        return 0
    kept = _elements(view, lambda op, made, saved, dtype, wide: made in mixers and op != "normOp" and dtype == torch.float32 and not wide)
    return kept // (streams * len(mixers))


@variant
def hc_norm_rows(view: LayerRoles, top_k: int | None) -> int:
    """The fp32 elements a token narrower than the hidden width that norms inside a stream mixer
    keep, per mixer (hy_v4's unweighted norm of the flattened streams keeps its rsqrt: 1); 0
    without."""
    mixers = _mixers(view)
    if not mixers:
        return 0
    kept = _elements(view, lambda op, made, saved, dtype, wide: op == "normOp" and made in mixers and dtype == torch.float32 and not wide)
    return kept // len(mixers)


@variant
def hc_norm_wide_fp32(view: LayerRoles, top_k: int | None) -> int:
    """The fp32 storages of streams × hidden elements a token booked to `normOp` that a stream
    mixer made, per mixer and over the mixers' width (deepseek_v4's flattened streams cast to
    fp32, first kept by its unweighted norm: 1; hy_v4's are its mixing linear's first: 0)."""
    mixers, streams = _mixers(view), _streams(view)
    if not mixers:
        return 0
    kept = _elements(view, lambda op, made, saved, dtype, wide: op == "normOp" and made in mixers and dtype == torch.float32 and wide)
    return kept // (streams * view.hidden * len(mixers))


def _out_bytes(view: LayerRoles, children: set[str]) -> int:
    """Bytes per token and hidden channel of the storages of the hidden width or more a token
    that the layer's own code saved, in a layer with stream mixers, after one of `children` ran
    (booked to it), made by that code or by the block, not by a mixer."""
    mixers = _mixers(view)
    if not mixers or not view.hidden:
        return 0
    ops = {f"child:{name}" for name in children}
    kept = sum(
        n * dtype.itemsize for (op, made, saved, dtype, wide), n in view.probe.stream_kept.items() if op in ops and saved is None and made not in mixers and wide
    )
    return kept // view.hidden


@variant
def hc_out_attn_bytes(view: LayerRoles, top_k: int | None) -> int:
    """Bytes per token and hidden channel of what the layer's own code (in no child), in a layer
    with stream mixers, keeps of the hidden width after the attention's child, made by that code
    or by the attention (hy_v4's expansion of the attention's output to the streams keeps its
    fp32 copy: 4; deepseek_v4's keeps the output as the attention gave it, bf16: 2); 0 without
    stream mixers."""
    return _out_bytes(view, view.mixer_children)


@variant
def hc_out_ff_bytes(view: LayerRoles, top_k: int | None) -> int:
    """The same after the feed-forward's children (hy_v4's: 4; deepseek_v4's: 2)."""
    return _out_bytes(view, view.ffn_children)
