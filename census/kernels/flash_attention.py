"""FlashAttention as the custom op `speccat::flash_attention`, keeping what FlashAttention keeps
(docs/census.md, "How a config becomes a spec", step 4).

The census runs layers on fake tensors, so what autograd keeps for backward is decided by the
op's autograd formula. `speccat::flash_attention` keeps q, k and v (grouped K/V heads
unexpanded), the output and the fp32 log-sum-exp of each score row, as FlashAttention does;
never the s×s scores. Given an additive score bias (inkling's relative position bias), it also
keeps that bias as given, as torch SDPA's memory-efficient kernel does with a float mask (its
autograd node, ScaledDotProductEfficientAttentionBackward0, saves query, key, value, attn_bias,
output, log_sumexp and the philox seed and offset: torch's tools/autograd/derivatives.yaml);
that bias is s×t per head, the one quadratic tensor the op keeps.

The op has a fake implementation (shapes only; that is all the census runs) and a real CPU
implementation in plain fp32 torch, with a backward that recomputes from what was kept, so it
is correct on real tensors too (the tests compare it with transformers' eager attention).

A model reaches it through transformers' attention interface, where census/kernels/attention.py
registers speccat's attention function, or through census/kernels/routing.py (SDPA calls and
eager attention routed to it): its record names no function of the model to stand in for.
"""

from __future__ import annotations

import torch
from torch import Tensor

from speccat.census.kernels.tensors import acc
from speccat.census.structure.kernel_registry import NAMESPACE, CallSeen, Kernel, KernelCall, Keeps, register, shapes, storage_key


def _expand_kv(x: Tensor, heads: int) -> Tensor:
    """(b, kv_heads, t, d) → (b, heads, t, d): query head i reads kv head i // (heads // kv_heads)."""
    return x.repeat_interleave(heads // x.shape[1], dim=1)


def _fold_kv(grad: Tensor, kv_heads: int) -> Tensor:
    """Sum the gradient of expanded heads back onto their kv head."""
    b, heads, t, d = grad.shape
    return grad.view(b, kv_heads, heads // kv_heads, t, d).sum(dim=2)


def _allowed(q: Tensor, k: Tensor, causal: bool, window: int, indices: Tensor | None) -> Tensor:
    """Which keys each query may see, (b, 1, s, t); queries are aligned to the last keys."""
    s, t = q.shape[2], k.shape[2]
    rows = torch.arange(s).unsqueeze(1) + (t - s)
    cols = torch.arange(t).unsqueeze(0)
    ok = torch.ones(s, t, dtype=torch.bool)
    if causal:
        ok &= cols <= rows
    if window > 0:
        ok &= (rows - cols) < window
    ok = ok.expand(q.shape[0], 1, s, t)
    if indices is not None:
        chosen = torch.zeros(q.shape[0], s, t, dtype=torch.bool).scatter_(-1, indices.long(), True)
        ok = ok & chosen.unsqueeze(1)
    return ok


def _logits(
    q: Tensor, k: Tensor, scale: float, causal: bool, window: int, softcap: float, indices: Tensor | None, bias: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Raw scores in the accumulation dtype, and the logits the softmax sees: soft-capped, plus
    the additive score bias (broadcast to (b, h, s, t)), masked."""
    raw = torch.matmul(acc(q), acc(_expand_kv(k, q.shape[1])).transpose(-1, -2)) * scale
    logits = softcap * torch.tanh(raw / softcap) if softcap > 0 else raw
    if bias is not None:
        logits = logits + acc(bias)
    return raw, logits.masked_fill(~_allowed(q, k, causal, window, indices), float("-inf"))


def _dropout_keep(shape, dropout_p: float, seed: int) -> Tensor | None:
    """The keep-mask of attention dropout, regenerated from the seed (no mask is stored)."""
    if dropout_p <= 0:
        return None
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=generator) >= dropout_p) / (1.0 - dropout_p)


def heads_major(q: Tensor) -> bool:
    """q's memory holds each head's tokens together ((b, h, s, d)-contiguous: built by torch.cat,
    MLA): the kernel's output is laid out so too (`_new_out`)."""
    return q.shape[1] > 1 and q.shape[2] > 1 and q.stride(1) > q.stride(2)


def _new_out(q: Tensor, dv: int, dtype: torch.dtype) -> Tensor:
    """The (b, s, h, dv) output as GPU flash kernels allocate it: in q's memory layout (empty_like(q)).

    For a q whose memory is (b, s, h, d) that is contiguous; for a heads-major q it is a
    (b, h, s, dv)-contiguous buffer seen as (b, s, h, dv), which the caller's reshape to
    (b, s, h·dv) has to copy.
    """
    b, heads, s, _ = q.shape
    if heads_major(q):
        return torch.empty_strided((b, s, heads, dv), (heads * s * dv, dv, s * dv, 1), dtype=dtype, device=q.device)
    return q.new_empty((b, s, heads, dv), dtype=dtype)


def _probabilities(logits: Tensor, lse: Tensor) -> Tensor:
    return torch.exp(logits - lse.unsqueeze(-1)).nan_to_num(0.0)  # a row with no key gives zeros


@torch.library.custom_op(f"{NAMESPACE}::flash_attention", mutates_args=())
def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    sinks: Tensor | None,
    indices: Tensor | None,
    scale: float,
    causal: bool,
    window: int,
    softcap: float,
    dropout_p: float,
    seed: int,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention of q (b, h, s, d) over k, v (b, kv_heads, t, d|dv) → (out (b, s, h, dv), lse (b, h, s) fp32).

    `out` has q's memory layout, as the GPU kernels allocate it (see `_new_out`).

    `sinks` are per-head logits that take probability mass without a value (gpt-oss);
    `indices` (b, s, topk) restrict each query to chosen keys (DeepSeek sparse attention);
    `window` > 0 limits each query to that many most recent keys; `softcap` > 0 caps logits
    with softcap·tanh(x/softcap); dropout regenerates its mask from `seed`.

    `bias` (broadcastable to (b, h, s, t)) is added to the scores before the softmax, as torch
    SDPA's memory-efficient kernel adds a float `attn_mask` (`_scaled_dot_product_efficient_attention`'s
    `attn_bias`); that kernel keeps the bias for backward and gives it a gradient, and so does
    this op. Masked scores stay masked whatever the bias holds.
    """
    _, logits = _logits(q, k, scale, causal, window, softcap, indices, bias)
    if sinks is not None:
        sink = acc(sinks).view(1, -1, 1, 1).expand(*logits.shape[:-1], 1)
        lse = torch.logsumexp(torch.cat([logits, sink], dim=-1), dim=-1)
    else:
        lse = torch.logsumexp(logits, dim=-1)
    probs = _probabilities(logits, lse)
    keep = _dropout_keep(probs.shape, dropout_p, seed)
    if keep is not None:
        probs = probs * keep
    out = torch.matmul(probs, acc(_expand_kv(v, q.shape[1])))
    return _new_out(q, v.shape[-1], q.dtype).copy_(out.transpose(1, 2)), lse


@flash_attention.register_fake
def _flash_attention_fake(q, k, v, sinks, indices, scale, causal, window, softcap, dropout_p, seed, bias=None):
    b, heads, s, _ = q.shape
    out = _new_out(q, v.shape[-1], q.dtype)
    lse = q.new_empty(b, heads, s, dtype=torch.promote_types(q.dtype, torch.float32))
    return out, lse


@torch.library.custom_op(f"{NAMESPACE}::flash_attention_backward", mutates_args=())
def flash_attention_backward(
    grad_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    sinks: Tensor | None,
    indices: Tensor | None,
    scale: float,
    causal: bool,
    window: int,
    softcap: float,
    dropout_p: float,
    seed: int,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv, dsinks, dbias) recomputed from what the forward kept (dsinks and
    dbias are empty without sinks or bias). dbias is the scores' gradient summed over the
    dimensions the bias broadcasts along, in the bias's dtype."""
    heads, kv_heads = q.shape[1], k.shape[1]
    raw, logits = _logits(q, k, scale, causal, window, softcap, indices, bias)
    probs = _probabilities(logits, lse)
    keep = _dropout_keep(probs.shape, dropout_p, seed)
    dout = acc(grad_out.transpose(1, 2))  # (b, h, s, dv)
    v_full = acc(_expand_kv(v, heads))
    dropped = probs * keep if keep is not None else probs
    dv = _fold_kv(torch.matmul(dropped.transpose(-1, -2), dout), kv_heads)
    dprobs = torch.matmul(dout, v_full.transpose(-1, -2))
    if keep is not None:
        dprobs = dprobs * keep
    row = (probs * dprobs).sum(dim=-1, keepdim=True)
    dlogits = probs * (dprobs - row)
    if softcap > 0:
        dlogits = dlogits * (1.0 - torch.tanh(raw / softcap) ** 2)
    dq = torch.matmul(dlogits, acc(_expand_kv(k, heads))) * scale
    dk = _fold_kv(torch.matmul(dlogits.transpose(-1, -2), acc(q)) * scale, kv_heads)
    if sinks is not None:
        sink_probs = torch.exp(acc(sinks).view(1, -1, 1) - lse)
        dsinks = -(sink_probs * row.squeeze(-1)).sum(dim=(0, 2)).to(sinks.dtype)
    else:
        dsinks = q.new_empty(0)
    dbias = _reduce_to(dlogits, bias.shape).to(bias.dtype) if bias is not None else q.new_empty(0)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dsinks, dbias


def _reduce_to(grad: Tensor, shape: torch.Size) -> Tensor:
    """A broadcast operand's gradient: grad summed over the dims the operand had as 1."""
    dims = [i for i, (n, g) in enumerate(zip(shape, grad.shape, strict=True)) if n == 1 and g != 1]
    return grad.sum(dim=dims, keepdim=True) if dims else grad


@flash_attention_backward.register_fake
def _flash_attention_backward_fake(grad_out, q, k, v, out, lse, sinks, indices, scale, causal, window, softcap, dropout_p, seed, bias=None):
    dsinks = torch.empty_like(sinks) if sinks is not None else q.new_empty(0)
    dbias = torch.empty_like(bias) if bias is not None else q.new_empty(0)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dsinks, dbias


def _flash_setup(ctx, inputs, output):
    q, k, v, sinks, indices, scale, causal, window, softcap, dropout_p, seed, bias = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, sinks, indices, bias)
    ctx.options = (scale, causal, window, softcap, dropout_p, seed)
    ctx.mark_non_differentiable(lse)


def _flash_backward(ctx, grad_out, _grad_lse):
    q, k, v, out, lse, sinks, indices, bias = ctx.saved_tensors
    dq, dk, dv, dsinks, dbias = flash_attention_backward(grad_out, q, k, v, out, lse, sinks, indices, *ctx.options, bias)
    return dq, dk, dv, (dsinks if sinks is not None else None), None, None, None, None, None, None, None, (dbias if bias is not None else None)


flash_attention.register_autograd(_flash_backward, setup_context=_flash_setup)


def _flops(q, k, v, *args, out_shape=None, **kwargs) -> int:
    """Both products of the core, 2·b·heads·s_q·s_kv·d for the scores and 2·b·heads·s_q·s_kv·dv
    for probabilities × values, as FlopCounterMode counts SDPA: a mask (causal, a sliding
    window, DeepSeek's sparse indices) shortens nothing."""
    b, heads, s_q, d = q
    s_kv, dv = k[2], v[-1]
    return 2 * b * heads * s_q * s_kv * (d + dv)


def _book(call: CallSeen) -> KernelCall:
    """The attention's shapes and what its inputs share: q heads-major, v a view of a fused
    projection, q and k views of v's storage, k and v one tensor, sparse indices, dropout, a
    score bias, keys or sparse indices another probed layer made."""
    args = call.args
    q, k, v, indices, causal, window, dropout = args[0], args[1], args[2], args[4], args[6], args[7], args[9]
    bias = args[11] if len(args) > 11 else call.kwargs.get("bias")
    return KernelCall(
        "attention", call.child, shapes(q=q.shape, k=k.shape, v=v.shape), int(window), bool(causal),
        heads_major=heads_major(q),
        v_is_view=v.untyped_storage().nbytes() > v.numel() * v.element_size(),
        qk_share_v=storage_key(q) == storage_key(v) == storage_key(k),
        kv_same=storage_key(k) == storage_key(v) and k.storage_offset() == v.storage_offset() and k.shape == v.shape and k.stride() == v.stride(),
        index_topk=int(indices.shape[-1]) if isinstance(indices, torch.Tensor) else 0,
        dropout=float(dropout),
        bias_bytes=bias.element_size() if isinstance(bias, torch.Tensor) else 0,
        kv_borrowed=call.made_elsewhere(k),
        index_borrowed=isinstance(indices, torch.Tensor) and call.made_elsewhere(indices),
    )  # fmt: skip


FLASH_ATTENTION = register(
    Kernel(
        op=torch.ops.speccat.flash_attention.default,
        kind="attention",
        book=_book,
        # its own outputs (the output, the log-sum-exp) are softmax's; q, k, v and a bias attBMM's
        keeps=Keeps(outputs="softmax", inputs="attBMM"),
        per_child=True,
        value_arg=2,
        flops=_flops,
    )
)
