"""Kimi delta attention (KDA: the delta rule gated per key channel) as the custom op
`speccat::chunk_kda`, keeping what flash-linear-attention's `chunk_kda` keeps, and its stand-in
for transformers' `chunk_kimi_delta_attention` (docs/census.md, "How a config becomes a spec",
step 4).

KDA is the gated delta rule with a diagonal gate: the state decays by one factor per key channel
(g is (b, s, heads, dk)) instead of one per head. transformers' KimiLinearDeltaAttention and
BailingHybridDeltaAttention call `chunk_kimi_delta_attention`, which transformers replaces on
GPU by the kernel hub's `chunk_kda` from fla (`use_kernel_func_from_hub_with_fallback("chunk_kda",
"fla")`). fla's ChunkKDAFunction (fla-org/flash-linear-attention, fla/ops/kda/chunk.py; the
forward in chunk_fwd.py, chunk_intra.py) called as transformers calls it (the gate computed
outside, `use_qk_l2norm_in_kernel=True`, default recompute) runs its inputs through
`input_guard` (a contiguous copy of v, a view of the conv output) and keeps for backward:

- q and k after the l2 norm (in q's dtype) with their fp32 inverse norms, one per key head;
- v (the contiguous copy);
- the fp32 chunk-local cumulative gate `g_cumsum` and the gate g as given, both per key channel;
- beta as given;
- Aqk, the intra-chunk scores q_i·(k_j ⊙ e^{g_i − g_j})·scale for j ≤ i, and Akk, the WY inverse
  (I + strictly-lower(β_i k_i·(k_j ⊙ e^{g_i − g_j})))⁻¹: 64 per value head and token each, in k's
  dtype.

Everything else (w, u, the gated q and k, the chunk states h, v_new) it drops and recomputes in
backward. fla scales the cumulative gate by 1/ln 2 to use exp2; this op keeps it in natural
log units, the same bytes. The real CPU implementation here runs the recurrence token by token
in fp32 (census/kernels/delta_math.py, with the gate per key channel) and its backward
recomputes from the kept tensors.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

from speccat.census.kernels.delta_math import (
    DELTA_CHUNK,
    chunk_cumsum,
    chunk_scores,
    delta_grads,
    delta_states,
    fold_heads,
    l2norm_backward,
    normalised,
    per_head,
    unchunked,
    wy_matrix,
)
from speccat.census.kernels.scope import kernel_scope
from speccat.census.kernels.tensors import acc
from speccat.census.structure.kernel_registry import NAMESPACE, CallSeen, Kernel, KernelCall, Keeps, register, shapes


@torch.library.custom_op(f"{NAMESPACE}::chunk_kda", mutates_args=())
def chunk_kda(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float, l2norm_qk: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """KDA over q, k (b, s, kv_heads, dk), v (b, s, heads, dv), the per-channel gate g (b, s, heads,
    dk, log space) and beta (b, s, heads).

    Returns the output (b, s, heads, dv) in v's dtype, then what backward keeps besides the
    inputs v, g and beta: q and k (normalised when `l2norm_qk`), their fp32 inverse norms
    (b, s, kv_heads), the fp32 chunk-local cumulative gate (b, s, heads, dk), and Aqk and Akk
    (b, s, heads, 64) in k's dtype.
    """
    qn, kn, q_rstd, k_rstd = normalised(q, k, l2norm_qk)
    heads = v.shape[2]
    g_cum = chunk_cumsum(acc(g), DELTA_CHUNK)
    q_scaled, k_heads, v_acc, beta_acc = per_head(qn, kn, v, beta, scale)
    out = delta_states(q_scaled, k_heads, v_acc, acc(g), beta_acc)[0].to(v.dtype)
    aqk = unchunked(chunk_scores(acc(qn) * scale, kn, g_cum, heads, DELTA_CHUNK, strict=False), q.shape[1]).to(k.dtype)
    akk = wy_matrix(kn, g_cum, beta, heads, DELTA_CHUNK).to(k.dtype)
    return out, qn, kn, q_rstd, k_rstd, g_cum, aqk, akk


@chunk_kda.register_fake
def _chunk_kda_fake(q, k, v, g, beta, scale, l2norm_qk):
    b, s, heads, _ = v.shape
    acc = torch.promote_types(q.dtype, torch.float32)
    return (
        torch.empty_like(v),
        torch.empty_like(q),
        torch.empty_like(k),
        q.new_empty(q.shape[:-1], dtype=acc),
        k.new_empty(k.shape[:-1], dtype=acc),
        g.new_empty(g.shape, dtype=torch.promote_types(g.dtype, torch.float32)),
        k.new_empty(b, s, heads, DELTA_CHUNK),
        k.new_empty(b, s, heads, DELTA_CHUNK),
    )


@torch.library.custom_op(f"{NAMESPACE}::chunk_kda_backward", mutates_args=())
def chunk_kda_backward(
    grad_out: Tensor,
    qn: Tensor,
    kn: Tensor,
    q_rstd: Tensor,
    k_rstd: Tensor,
    v: Tensor,
    g_cum: Tensor,
    g: Tensor,
    beta: Tensor,
    aqk: Tensor,
    akk: Tensor,
    scale: float,
    l2norm_qk: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, dg, dbeta), recomputing the recurrence from the kept tensors (g_cum, Aqk and
    Akk are kept for parity with fla, whose backward reads them)."""
    q, k, v_acc, beta_acc = per_head(qn, kn, v, beta, scale)
    dq, dk, dv, dg, dbeta = delta_grads(q, k, v_acc, acc(g), beta_acc, acc(grad_out))
    kv_heads = kn.shape[2]
    dqn, dkn = fold_heads(dq, kv_heads) * scale, fold_heads(dk, kv_heads)
    if l2norm_qk:
        dqn, dkn = l2norm_backward(qn, q_rstd, dqn), l2norm_backward(kn, k_rstd, dkn)
    return dqn.to(qn.dtype), dkn.to(kn.dtype), dv.to(v.dtype), dg.to(g.dtype), dbeta.to(beta.dtype)


@chunk_kda_backward.register_fake
def _chunk_kda_backward_fake(grad_out, qn, kn, q_rstd, k_rstd, v, g_cum, g, beta, *rest):
    return torch.empty_like(qn), torch.empty_like(kn), torch.empty_like(v), torch.empty_like(g), torch.empty_like(beta)


def _kda_setup(ctx, inputs, output):
    q, k, v, g, beta, scale, l2norm_qk = inputs
    _, qn, kn, q_rstd, k_rstd, g_cum, aqk, akk = output
    ctx.save_for_backward(qn, kn, q_rstd, k_rstd, v, g_cum, g, beta, aqk, akk)
    ctx.options = (scale, l2norm_qk)
    ctx.mark_non_differentiable(qn, kn, q_rstd, k_rstd, g_cum, aqk, akk)


def _kda_backward(ctx, grad_out, *_unused):
    return (*chunk_kda_backward(grad_out, *ctx.saved_tensors, *ctx.options), None, None)


chunk_kda.register_autograd(_kda_backward, setup_context=_kda_setup)


def speccat_chunk_kda(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    g: Tensor,
    beta: Tensor,
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    scale: float | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """transformers' chunked Kimi delta attention signature (`chunk_kimi_delta_attention`),
    computed by `speccat::chunk_kda`. From an empty state, as the delta rule."""
    if initial_state is not None or output_final_state:
        raise ValueError("speccat's Kimi delta attention runs from an empty state and returns no final state")
    scale = scale if scale is not None else key.shape[-1] ** -0.5
    # fla's input guard: every input contiguous (v its own copy, not a view of the conv output)
    query, key, value, g, beta = (t.contiguous() for t in (query, key, value, g, beta))
    with kernel_scope(KDA.name):
        out = chunk_kda(query, key, value, g, beta, float(scale), bool(use_qk_l2norm_in_kernel))[0]
    return out, None


def _book(call: CallSeen) -> KernelCall:
    """A delta rule call whose gate, one per key channel, is kept as given: its element bytes."""
    q, k, v, g = call.args[:4]
    return KernelCall("delta_rule", call.child, shapes(q=q.shape, k=k.shape, v=v.shape), gate_channel_bytes=g.element_size())


KDA = register(
    Kernel(
        op=torch.ops.speccat.chunk_kda.default,
        kind="delta_rule",
        book=_book,
        calls=re.compile(r"^(chunk_kimi_delta_attention|chunk_kda)$"),  # transformers' name, fla's kernel name (the hub hook's)
        stand_in=speccat_chunk_kda,
        keeps=Keeps(outputs="linrec", inputs="linrec"),
        per_child=True,
    )
)
