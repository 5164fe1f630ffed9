"""A per-layer input gate beside a layer's MLP, recognised by structure (docs/census.md, "Op counts").

gemma-4's decoder layers end with one: after the MLP's residual add, a projection from the
hidden size to a small width p, an activation, a product with the layer's slice of the
per-layer inputs (a tensor the decoder hands every layer beside its hidden states), a
projection back to the hidden size and a norm on the stream. It is no second MLP: the census
states it as the variant fact `per_layer_gate_width` (p) and leaves it out of the dense MLP's
width, projection count and activation calls; the records price it from p.

Told apart from a feed-forward by what ran, never by a name: a pair of the feed-forward's
projections h→p and p→h (p not the hidden size) where the layer's own code, between its
children, multiplied a tensor p wide by one of the layer's other inputs (census/measure/input_products.py
`input_products`).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from speccat.census.structure.predicates import is_activation_region, is_projection
from speccat.census.measure.layer_probe import LayerProbe


@dataclass(frozen=True)
class LayerGate:
    gate: str  # the projection from the hidden size to the gate's width
    projection: str  # the projection back to the hidden size
    width: int  # p
    activations: frozenset[str]  # the owners (census/measure/layer_probe.py activations) of the gate's activation calls

    @property
    def paths(self) -> frozenset[str]:
        return frozenset({self.gate, self.projection})


def _top(path: str) -> str:
    return path.split(".", 1)[0]


def find_layer_gate(layer: nn.Module, probe: LayerProbe, ffn_children: set[str], hidden: int) -> LayerGate | None:
    """The layer's per-layer input gate, or None.

    Its activation is the activation that ran in the top-level child holding its projections,
    or, when they are the layer's own children, the layer's own activation children, provided no
    other projection of the feed-forward is one too, and in the first case no other projection
    is in that child (bart's fc1 and fc2 beside a gate would leave
    the activations' owner unknown: then there is no gate, and the census refuses the layer's
    two widths as before)."""
    projections = [(path, m) for path, m in layer.named_modules() if path and _top(path) in ffn_children and is_projection(m)]
    for width in sorted(probe.input_products - {hidden}):
        gates = [path for path, m in projections if tuple(m.weight.shape) == (width, hidden)]
        backs = [path for path, m in projections if tuple(m.weight.shape) == (hidden, width)]
        if len(gates) != 1 or len(backs) != 1:
            continue
        gate, back = gates[0], backs[0]
        if "." in gate or "." in back:
            others = [path for path, _ in projections if path not in (gate, back) and _top(path) == _top(gate)]
            if _top(gate) != _top(back) or others:
                continue
            owners = {o for o in probe.activations if _top(o) == _top(gate)}
        else:
            others = [path for path, _ in projections if path not in (gate, back)]
            if any("." not in path for path in others):
                continue
            owners = {o for o in probe.activations if "." not in o and is_activation_region(layer.get_submodule(o))}
        if owners:
            return LayerGate(gate, back, width, frozenset(owners))
    return None
