"""Layers into distinct shapes, and the stack as run-length groups of kinds (docs/census.md,
"How a config becomes a spec", step 3).

Each decoder layer gets a signature: its class, its attention flavour (linear when a gated delta
rule runs, full when transformers' attention interface does, `eager` when its code calls neither
and what runs decides), its ffn flavour (moe when it holds routed experts) and its parameters'
paths, shapes and dtypes. Equal signatures are one distinct shape, probed once; census/kinds.py
names each shape's kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from speccat.census.predicates import is_experts, is_projection, is_state_space_mixer, runs_delta_rule, runs_selective_scan, runs_short_conv, runs_ssd_scan, uses_attention_interface
from speccat.census.spec import SpecError


@dataclass(eq=False)  # compared and hashed by identity: one object per distinct shape
class Shape:
    """One distinct layer shape: its flavours, signature and the layers that have it."""

    attention: str  # "full", "cross", "linear", "mamba", "mamba2", "short_conv", "none", or "eager" until the probe settles it
    ffn: str  # "dense", "moe", or "none" (a mixer-only block)
    signature: tuple
    layers: list[int] = field(default_factory=list)

    @property
    def first(self) -> int:
        return self.layers[0]


def signature(index: int, layer: nn.Module) -> tuple:
    """(class, attention flavour, ffn flavour, parameters' paths, shapes and dtypes), refusing layers
    no family prices: state-space mixers, unfused experts. A cross-attention layer is told by
    what runs (census/census.py: the decoder skips it without encoder states).

    attention is mamba when a selective scan runs (fused, or apart from its conv), mamba2 when the fused SSD scan does, linear
    when a gated delta rule runs, short_conv when a causal conv1d runs alone (LFM2), full when
    the attention interface does, `eager` (decided by
    what runs: full attention, or `none` for a feed-forward-only block) otherwise; ffn is moe
    when the layer holds routed experts, none when no child beside the mixer holds projections.
    """
    attention, ffn = "none", "dense"
    scan_children, mixer_children = set(), set()
    for name, module in layer.named_modules():
        if not name:
            continue
        scan = "mamba" if runs_selective_scan(module) else "mamba2" if runs_ssd_scan(module) else None
        if scan is not None:
            if attention in ("full", "linear"):
                raise SpecError(
                    "unsupported_layer",
                    f"layer {index} ({type(layer).__name__}): a {scan} mixer ({name}) beside {attention} attention in one layer (a parallel hybrid); "
                    "the census prices one mixer per layer",
                )
            attention = scan
            scan_children.add(name.split(".", 1)[0])
            continue
        if name.split(".", 1)[0] in scan_children:
            continue
        if is_state_space_mixer(name, module):
            raise SpecError("unsupported_layer", f"layer {index} ({type(layer).__name__}) holds {name} ({type(module).__name__}): a state-space mixer no family prices")
        if is_experts(module):
            ffn = "moe"
        elif name.rsplit(".", 1)[-1] == "experts":
            raise SpecError("unsupported_layer", f"layer {index}: {name} is not built with transformers' experts interface, so it cannot run grouped_mm")
        if attention in ("mamba", "mamba2"):
            if uses_attention_interface(module) or runs_delta_rule(module):
                raise SpecError(
                    "unsupported_layer",
                    f"layer {index} ({type(layer).__name__}): attention ({name}) beside a {attention} mixer in one layer (falcon_h1's parallel hybrid); "
                    "the census prices one mixer per layer",
                )
            continue
        if runs_delta_rule(module):
            attention = "linear"
            mixer_children.add(name.split(".", 1)[0])
        elif attention == "none" and runs_short_conv(module):
            attention = "short_conv"
            mixer_children.add(name.split(".", 1)[0])
        elif attention == "none" and uses_attention_interface(module):
            attention = "full"
            mixer_children.add(name.split(".", 1)[0])
    mixer_children |= scan_children
    if mixer_children and ffn != "moe" and not any(
        n not in mixer_children and any(is_projection(m) or is_experts(m) for m in c.modules()) for n, c in layer.named_children()
    ):
        ffn = "none"  # a mixer-only block (Mamba, Mamba2, nemotron_h's attention blocks)
    if attention == "none":
        attention = "eager"  # no interface call in its code: its own attention, told by what runs (census/routing.py)
    params = tuple((name, tuple(p.shape), p.dtype) for name, p in layer.named_parameters())
    return (type(layer).__name__, attention, ffn, params)


def classify(layers: nn.ModuleList) -> list[tuple[int, Shape]]:
    """Each layer's index and its distinct shape (shared objects for equal signatures)."""
    shapes: dict[tuple, Shape] = {}
    stack = []
    for index, layer in enumerate(layers):
        sig = signature(index, layer)
        shape = shapes.get(sig)
        if shape is None:
            shape = shapes[sig] = Shape(sig[1], sig[2], sig)
        shape.layers.append(index)
        stack.append((index, shape))
    return stack


def layer_groups(stack: list[tuple[int, Shape]], kind_of: dict[int, str]) -> list[dict]:
    """The layer stack as run-length groups of kinds: [{kind, count}, ...] in layer order."""
    groups: list[dict] = []
    for _, shape in stack:
        kind = kind_of[shape.first]
        if groups and groups[-1]["kind"] == kind:
            groups[-1]["count"] += 1
        else:
            groups.append({"kind": kind, "count": 1})
    return groups
