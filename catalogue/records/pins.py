"""Why no layout of a GPU count can have the fields `speccat fit` holds (docs/planning.md,
"What fit refuses"): the first reason found, as one line, for a LayoutError "infeasible".

`candidates.layouts` enumerates the layouts; when the held fields (dp, tp, pp, ep, cp, ZeRO stage)
leave none, this says which field cannot be, rather than letting `fit` report that nothing
fits, which would read as "too little memory". What a layer kind cannot have at a setting
(heads not divisible by tp, ...) is layouts.yaml's, and `speccat fit` reports its rule (flows/fit_engine.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping


def no_layout(spec: Mapping, gpus: int, fixed: Mapping[str, int | None], zeros: Iterable[int], node: int) -> str:
    """The reason no layout of `gpus` ranks holds `fixed` (candidates.layouts found none)."""
    held = {name: fixed[name] for name in ("dp", "tp", "pp", "cp") if fixed.get(name) is not None}
    product = math.prod(held.values())
    said = " × ".join(f"{name} {value}" for name, value in held.items())
    if gpus % product:
        return f"{said}{f' = {product}' if len(held) > 1 else ''} does not divide {gpus} GPUs"
    if len(held) == 4 and product != gpus:
        return f"{said} = {product} GPUs, not the {gpus} asked for"
    for name in ("tp", "cp"):
        if held.get(name, 1) > node:
            return f"{name} {held[name]} spans more than one node of the accelerator ({node} GPUs): tp and cp stay within a node"
    n_layers = sum(group["count"] for group in spec["layers"])
    if held.get("pp", 1) > n_layers:
        return f"pp {held['pp']}: the model has {n_layers} layers, at most one pipeline stage each"
    experts = int(spec.get("num_experts", 1) or 1)
    ep = fixed.get("ep")
    if ep is not None and ep > 1:
        if experts <= 1:
            return f"ep {ep}: the model has no routed experts to split"
        if experts % ep:
            return f"ep {ep} does not divide the {experts} routed experts"
        return f"ep {ep} divides dp × cp of no layout of {gpus} GPUs with {said or 'nothing held'}"
    if all(zero for zero in zeros):
        return f"ZeRO stage {', '.join(map(str, zeros))} shards over data-parallel ranks, and every layout of {gpus} GPUs with {said} has dp × cp = 1"
    return f"no layout of {gpus} GPUs has {said or 'the fields held'}"
