"""The variant facts of the norms on a layer's hidden stream (docs/census.md, "Variant facts"):
what the layer's first stream norm does in fp32, whether it keeps a copy of its weight, and
stream norm calls that read one input. Each reader is registered with `@variant`
(census/describe/variant_registry.py); its docstring is what docs/census.md's table says it
is read from.
"""

from __future__ import annotations

import torch

from speccat.census.describe.layer_roles import HALF, LayerRoles
from speccat.census.describe.variant_registry import variant
from speccat.census.structure.predicates import is_layer_norm, is_projection


def _first_norm_ops(view: LayerRoles) -> list:
    """The ops the probe saw inside the layer's first stream norm (none without one): those of the
    norm it holds, where it wraps one (axk2's gated RMS norm multiplies its inner norm's output by
    a gate, whose fp32 product is no weight's)."""
    norms = view.stream_norm_paths()
    if not norms:
        return []
    nested = [path for path in view.probe.norm_ops if path.startswith(norms[0] + ".")]
    return view.probe.norm_ops.get(nested[0] if nested else norms[0], [])


@variant
def norm_upcast(view: LayerRoles, top_k: int | None) -> bool:
    """The ops inside the layer's first norm on its hidden stream: a cast of a half input to fp32,
    or, with no cast, a first op reading a row of the hidden width in fp32: the layer built in a
    half dtype hands its norms an fp32 stream (ergo's embedding and residual gates are kept in
    fp32, so `hidden_states.float()` is no op), or an input given in fp32 (inkling2's norms on
    the fp32 output of its attention over the stack's depth). Either way the norm keeps its
    input in fp32."""
    ops = _first_norm_ops(view)
    cast = any(op.name == "_to_copy" and op.out_dtype == torch.float32 and op.in_dtype in HALF for op in ops)
    return cast or (bool(ops) and ops[0].in_dtype == torch.float32 and ops[0].in_last == view.probe.hidden_width)


@variant
def norm_scale_fp32(view: LayerRoles, top_k: int | None) -> bool:
    """The ops inside the layer's first norm, which keeps its input in fp32 (`norm_upcast`): its
    last product (the weight's) in fp32."""
    muls = [op for op in _first_norm_ops(view) if op.name == "mul"]
    return norm_upcast(view, top_k) and bool(muls) and muls[-1].out_dtype == torch.float32


@variant
def norm_weightless(view: LayerRoles, top_k: int | None) -> bool:
    """The layer's first norm on its hidden stream holds no parameters: an RMS norm with no weight
    (nanochat's, dory's L2 norm) keeps its input (fp32 when it upcasts) and its statistic, and no
    normalised input for a weight to multiply."""
    norms = view.stream_norm_paths()
    return bool(norms) and not any(True for _ in view.module(norms[0]).parameters())


@variant
def norm_weight_copy(view: LayerRoles, top_k: int | None) -> bool:
    """The layer's first norm saved a tensor with no token dimension: a computed copy of its
    weight (Gemma's and Qwen3-Next's fp32 `1 + weight`), which the final norm keeps too (ends.yaml)."""
    norms = view.stream_norm_paths()
    return bool(norms) and norms[0] in view.probe.norm_weight_copies


@variant
def norm_inputs_shared(view: LayerRoles, top_k: int | None) -> int:
    """The stream norm calls whose input another of them read first (the storage each was called
    with): 1 for gpt-neox's parallel residual, where both norms take the layer's input and a
    LayerNorm keeps it once. One call's (`first_call_norms`)."""
    norms = view.first_call_norms()
    return len(norms) - len({key for _, key in norms})


@variant
def norm_fp32_extra(view: LayerRoles, top_k: int | None) -> int:
    """The storages the layer's first stream norm saved per call that are fp32 rows of its weight's
    width, less its upcast input (`norm_upcast`) and, for an RMS norm, its normalised input in fp32
    (`norm_scale_fp32`), which the records count already."""
    norms = view.stream_norm_paths()
    if not norms:
        return 0
    rows = view.probe.norm_fp32_rows.get(norms[0], 0) // max(view.probe.norm_calls.get(norms[0], 1), 1)
    counted = int(norm_upcast(view, top_k)) + int(norm_scale_fp32(view, top_k) and not is_layer_norm(view.module(norms[0])))
    return max(0, rows - counted)


def _gated_norm_calls(view: LayerRoles) -> list[str]:
    """The stream norm calls (one path per call) of a norm that wraps a norm that ran and whose
    own ops, outside that norm, hold a sigmoid: a gate on the inner norm's output (axk2's gated
    RMS norm, y·sigmoid(fc2(silu(fc1(y))).float()))."""
    ops = view.probe.norm_ops
    gated = {
        path for path in view.stream_norm_paths()
        if any(inner.startswith(path + ".") for inner in ops) and any(op.name == "sigmoid" for op in ops.get(path, []))
    }  # fmt: skip
    return [path for path, _ in view.probe.stream_norms if path in gated]


@variant
def norm_gates(view: LayerRoles, top_k: int | None) -> int:
    """Stream norm calls per call of the layer whose norm wraps a norm that ran and whose own ops
    hold a sigmoid (census/measure/watcher.py notes the ops by the innermost norm running): a gate
    on the inner norm's output (axk2's gated RMS norm: 1 in its dense layers, 2 in its MoE layers)."""
    return view.per_call(len(_gated_norm_calls(view)))


@variant
def norm_gate_rank(view: LayerRoles, top_k: int | None) -> int:
    """With such a gate: the narrowest output of the projections inside the first gated norm (the
    gate MLP's bottleneck: axk2's fc1, gated_norm_rank 16); 0 without one."""
    calls = _gated_norm_calls(view)
    if not calls:
        return 0
    widths = [int(m.weight.shape[0]) for _, m in view.module(calls[0]).named_modules() if is_projection(m)]
    return min(widths, default=0)


@variant
def norm_gate_fp32(view: LayerRoles, top_k: int | None) -> bool:
    """With such a gate: the first gated norm's sigmoid gave fp32 (taken on an fp32 copy of the
    gate's logits: axk2's), so that its kept output is fp32; false without one."""
    calls = _gated_norm_calls(view)
    return bool(calls) and any(op.name == "sigmoid" and op.out_dtype == torch.float32 for op in view.probe.norm_ops.get(calls[0], []))
