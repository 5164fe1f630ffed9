"""The gated delta rule (one decay per head: Qwen3-Next's, qwen3.5's linear attention) as the
custom op `speccat::chunk_gated_delta_rule`, keeping what flash-linear-attention's chunked gated
delta rule keeps, and its stand-in for transformers' `chunk_gated_delta_rule` (docs/census.md,
"How a config becomes a spec", step 4).

fla's chunked kernel first makes v contiguous (its own copy, not the conv output v is a view
of), then keeps for backward: the l2-normalised q and k with their fp32 inverse norms, v, the
fp32 chunk-local cumulative decay, beta and the per-chunk WY matrix A (one row of 64 per value
head and token, in k's dtype). The op keeps exactly that. Its fake implementation gives shapes
only (all the census runs); its real CPU one runs the recurrence token by token in fp32
(census/kernels/delta_math.py) and its backward recomputes from what was kept, so the op is
correct on real tensors too (the tests compare it with transformers' torch implementation).
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

from speccat.census.kernels.delta_math import (
    DELTA_CHUNK,
    chunk_cumsum,
    chunk_uncumsum,
    delta_grads,
    delta_states,
    fold_heads,
    l2norm_backward,
    normalised,
    per_head,
    wy_matrix,
)
from speccat.census.kernels.scope import kernel_scope
from speccat.census.kernels.tensors import acc
from speccat.census.structure.kernel_registry import NAMESPACE, CallSeen, Kernel, KernelCall, Keeps, register, shapes


@torch.library.custom_op(f"{NAMESPACE}::chunk_gated_delta_rule", mutates_args=())
def chunk_gated_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float, l2norm_qk: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Gated delta rule over q, k (b, s, kv_heads, dk), v (b, s, heads, dv), decay g and beta (b, s, heads).

    Returns the output (b, s, heads, dv) in v's dtype, then what backward keeps: q and k
    (normalised when `l2norm_qk`), their fp32 inverse norms (b, s, kv_heads), the fp32
    chunk-local cumulative decay and the WY matrix A (b, s, heads, 64) in k's dtype.
    """
    qn, kn, q_rstd, k_rstd = normalised(q, k, l2norm_qk)
    g_cum = chunk_cumsum(acc(g), DELTA_CHUNK)
    out = delta_states(*per_head(qn, kn, v, beta, scale)[:3], acc(g), acc(beta))[0].to(v.dtype)
    wy = wy_matrix(kn, g_cum, beta, v.shape[2], DELTA_CHUNK).to(k.dtype)
    return out, qn, kn, q_rstd, k_rstd, g_cum, wy


@chunk_gated_delta_rule.register_fake
def _chunk_gated_delta_rule_fake(q, k, v, g, beta, scale, l2norm_qk):
    b, s, heads, _ = v.shape
    return (
        torch.empty_like(v),
        torch.empty_like(q),
        torch.empty_like(k),
        q.new_empty(q.shape[:-1], dtype=torch.promote_types(q.dtype, torch.float32)),
        k.new_empty(k.shape[:-1], dtype=torch.promote_types(k.dtype, torch.float32)),
        g.new_empty(b, s, heads, dtype=torch.promote_types(g.dtype, torch.float32)),
        k.new_empty(b, s, heads, DELTA_CHUNK),
    )


@torch.library.custom_op(f"{NAMESPACE}::chunk_gated_delta_rule_backward", mutates_args=())
def chunk_gated_delta_rule_backward(
    grad_out: Tensor,
    qn: Tensor,
    kn: Tensor,
    q_rstd: Tensor,
    k_rstd: Tensor,
    v: Tensor,
    g_cum: Tensor,
    beta: Tensor,
    wy: Tensor,
    scale: float,
    l2norm_qk: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, dg, dbeta), recomputing the rule from the kept tensors (A is kept for parity with fla)."""
    q, k, v_acc, beta_acc = per_head(qn, kn, v, beta, scale)
    dq, dk, dv, dg, dbeta = delta_grads(q, k, v_acc, chunk_uncumsum(g_cum, DELTA_CHUNK), beta_acc, acc(grad_out))
    kv_heads = kn.shape[2]
    dqn, dkn = fold_heads(dq, kv_heads) * scale, fold_heads(dk, kv_heads)
    if l2norm_qk:
        dq, dk = l2norm_backward(qn, q_rstd, dqn), l2norm_backward(kn, k_rstd, dkn)
    else:
        dq, dk = dqn, dkn
    return dq.to(qn.dtype), dk.to(kn.dtype), dv.to(v.dtype), dg, dbeta.to(beta.dtype)


@chunk_gated_delta_rule_backward.register_fake
def _chunk_gated_delta_rule_backward_fake(grad_out, qn, kn, q_rstd, k_rstd, v, g_cum, beta, *rest):
    return torch.empty_like(qn), torch.empty_like(kn), torch.empty_like(v), torch.empty_like(g_cum), torch.empty_like(beta)


def _delta_setup(ctx, inputs, output):
    q, k, v, g, beta, scale, l2norm_qk = inputs
    _, qn, kn, q_rstd, k_rstd, g_cum, wy = output
    ctx.save_for_backward(qn, kn, q_rstd, k_rstd, v, g_cum, beta, wy)
    ctx.options = (scale, l2norm_qk)
    ctx.g_dtype = g.dtype
    ctx.mark_non_differentiable(qn, kn, q_rstd, k_rstd, g_cum, wy)


def _delta_backward(ctx, grad_out, *_unused):
    qn, kn, q_rstd, k_rstd, v, g_cum, beta, wy = ctx.saved_tensors
    dq, dk, dv, dg, dbeta = chunk_gated_delta_rule_backward(grad_out, qn, kn, q_rstd, k_rstd, v, g_cum, beta, wy, *ctx.options)
    return dq, dk, dv, dg.to(ctx.g_dtype), dbeta, None, None


chunk_gated_delta_rule.register_autograd(_delta_backward, setup_context=_delta_setup)


def speccat_chunk_gated_delta_rule(
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
    """transformers' chunked gated delta rule signature, computed by `speccat::chunk_gated_delta_rule`.

    Training from the start of a sequence has no recurrent state in or out; the census never
    passes one, so a state is refused rather than ignored.
    """
    if initial_state is not None or output_final_state:
        raise ValueError("speccat's gated delta rule runs from an empty state and returns no final state")
    scale = scale if scale is not None else key.shape[-1] ** -0.5
    value = value.contiguous()  # flash-linear-attention's input guard: v's own copy, not a view of the conv output
    with kernel_scope(DELTA_RULE.name):
        out = chunk_gated_delta_rule(query, key, value, g, beta, float(scale), bool(use_qk_l2norm_in_kernel))[0]
    return out, None


def _book(call: CallSeen) -> KernelCall:
    q, k, v = call.args[:3]
    return KernelCall("delta_rule", call.child, shapes(q=q.shape, k=k.shape, v=v.shape))


DELTA_RULE = register(
    Kernel(
        op=torch.ops.speccat.chunk_gated_delta_rule.default,
        kind="delta_rule",
        book=_book,
        calls=re.compile(r"chunk_gated_delta_rule"),  # the hook's name, and transformers' torch_chunk_gated_delta_rule
        stand_in=speccat_chunk_gated_delta_rule,
        keeps=Keeps(outputs="linrec", inputs="linrec"),
        per_child=True,
    )
)
