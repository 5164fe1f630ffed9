"""Layers into distinct shapes, and shapes into their family's kinds (docs/census.md, "How a
config becomes a spec", step 3).

Each decoder layer gets a signature: its class, its attention flavour (linear when a gated delta
rule runs, full when transformers' attention interface does), its ffn flavour (moe when it holds
routed experts) and its parameters' paths, shapes and dtypes. Equal signatures are one distinct
shape, probed once. Each shape then takes the one kind of the family whose flavours it has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from speccat.census.family import Family
from speccat.census.predicates import is_experts, is_state_space_mixer, runs_delta_rule, uses_attention_interface
from speccat.census.spec import SpecError


@dataclass(eq=False)  # compared and hashed by identity: one object per distinct shape
class Shape:
    """One distinct layer shape: its flavours, signature and the layers that have it."""

    attention: str  # "full" or "linear"
    ffn: str  # "dense" or "moe"
    signature: tuple
    layers: list[int] = field(default_factory=list)

    @property
    def first(self) -> int:
        return self.layers[0]


def signature(index: int, layer: nn.Module) -> tuple:
    """(class, attention flavour, ffn flavour, parameters' paths, shapes and dtypes), refusing layers
    no family prices: state-space mixers, unfused experts, neither attention nor a delta rule.

    attention is linear when a gated delta rule runs, full when the attention interface does;
    ffn is moe when the layer holds routed experts.
    """
    attention, ffn = "none", "dense"
    for name, module in layer.named_modules():
        if not name:
            continue
        if is_state_space_mixer(name, module):
            raise SpecError("unsupported_layer", f"layer {index} ({type(layer).__name__}) holds {name} ({type(module).__name__}): a state-space mixer no family prices")
        if is_experts(module):
            ffn = "moe"
        elif name.rsplit(".", 1)[-1] == "experts":
            raise SpecError("unsupported_layer", f"layer {index}: {name} is not built with transformers' experts interface, so it cannot run grouped_mm")
        if runs_delta_rule(module):
            attention = "linear"
        elif attention == "none" and uses_attention_interface(module):
            attention = "full"
    if attention == "none":
        children = ", ".join(sorted({type(m).__name__ for m in layer.children()}))
        raise SpecError(
            "unsupported_layer",
            f"layer {index} ({type(layer).__name__}: {children}): runs neither transformers' attention interface "
            "nor a gated delta rule (a mixer no family prices)",
        )
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


def _describe_kinds(family: Family) -> str:
    return ", ".join(f"{k.name} ({k.attention}, {k.ffn or 'any ffn'})" for k in family.kinds.values())


def kinds_of(family: Family, shapes: list[Shape]) -> dict[int, str]:
    """Each distinct shape's kind (keyed by its first layer); two shapes on one kind is a conflict."""
    kind_of: dict[int, str] = {}
    owner: dict[str, int] = {}
    for shape in shapes:
        kind = family.kind_for(shape.attention, shape.ffn)
        if kind is None:
            raise SpecError(
                "unsupported_layer",
                f"layer {shape.first}: family {family.name!r} has no kind for attention={shape.attention}, ffn={shape.ffn} "
                f"(kinds: {_describe_kinds(family)})",
            )
        if kind in owner:
            raise SpecError(
                "kind_conflict",
                f"layers {owner[kind]} and {shape.first} are built differently but both map to kind {kind!r} of family {family.name!r}",
            )
        owner[kind] = shape.first
        kind_of[shape.first] = kind
    return kind_of


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
