"""speccat's attention kernels as torch.library custom ops (docs/census.md, "How a config becomes a spec", step 4).

The census runs layers on fake tensors, so what autograd keeps for backward is decided by the
ops' autograd formulas. These two ops keep what the production kernels keep:

- `speccat::flash_attention` keeps q, k and v (grouped K/V heads unexpanded), the output and
  the fp32 log-sum-exp of each score row, as FlashAttention does; never the s×s scores. Given
  an additive score bias (inkling's relative position bias), it also keeps that bias as given,
  as torch SDPA's memory-efficient kernel does with a float mask (its autograd node,
  ScaledDotProductEfficientAttentionBackward0, saves query, key, value, attn_bias, output,
  log_sumexp and the philox seed and offset: torch's tools/autograd/derivatives.yaml); that
  bias is s×t per head, the one quadratic tensor the op keeps.
- `speccat::chunk_gated_delta_rule` keeps the l2-normalised q and k with their fp32 inverse
  norms, v, the chunk-local cumulative decay (fp32), beta and the per-chunk WY matrix A, as
  flash-linear-attention's chunked gated delta rule does (which first makes v contiguous: its
  own copy, not the conv output v is a view of).
- `speccat::causal_conv1d` keeps only its input (and the weights), as the causal-conv1d kernel
  does: the convolution and its SiLU are recomputed in backward, so neither output is kept.

Each op has a fake implementation (shapes only; that is all the census runs) and a real CPU
implementation in plain fp32 torch, with a backward that recomputes from what was kept, so the
ops are correct on real tensors too (the tests compare them with reference math).
"""

from __future__ import annotations

import torch
from torch import Tensor

LIB = "speccat"
DELTA_CHUNK = 64  # flash-linear-attention's chunk length; A holds one row of this width per token


# --------------------------------------------------------------------------- flash attention


def _acc(x: Tensor) -> Tensor:
    """x in the accumulation dtype: fp32 for half types, as kernels accumulate (fp64 stays fp64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


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
    raw = torch.matmul(_acc(q), _acc(_expand_kv(k, q.shape[1])).transpose(-1, -2)) * scale
    logits = softcap * torch.tanh(raw / softcap) if softcap > 0 else raw
    if bias is not None:
        logits = logits + _acc(bias)
    return raw, logits.masked_fill(~_allowed(q, k, causal, window, indices), float("-inf"))


def _dropout_keep(shape, dropout_p: float, seed: int) -> Tensor | None:
    """The keep-mask of attention dropout, regenerated from the seed (no mask is stored)."""
    if dropout_p <= 0:
        return None
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=generator) >= dropout_p) / (1.0 - dropout_p)


def _heads_major(q: Tensor) -> bool:
    """q's memory holds each head's tokens together ((b, h, s, d)-contiguous: built by torch.cat, MLA)."""
    return q.shape[1] > 1 and q.shape[2] > 1 and q.stride(1) > q.stride(2)


def _new_out(q: Tensor, dv: int, dtype: torch.dtype) -> Tensor:
    """The (b, s, h, dv) output as GPU flash kernels allocate it: in q's memory layout (empty_like(q)).

    For a q whose memory is (b, s, h, d) that is contiguous; for a heads-major q it is a
    (b, h, s, dv)-contiguous buffer seen as (b, s, h, dv), which the caller's reshape to
    (b, s, h·dv) has to copy.
    """
    b, heads, s, _ = q.shape
    if _heads_major(q):
        return torch.empty_strided((b, s, heads, dv), (heads * s * dv, dv, s * dv, 1), dtype=dtype, device=q.device)
    return q.new_empty((b, s, heads, dv), dtype=dtype)


def _probabilities(logits: Tensor, lse: Tensor) -> Tensor:
    return torch.exp(logits - lse.unsqueeze(-1)).nan_to_num(0.0)  # a row with no key gives zeros


@torch.library.custom_op(f"{LIB}::flash_attention", mutates_args=())
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
        sink = _acc(sinks).view(1, -1, 1, 1).expand(*logits.shape[:-1], 1)
        lse = torch.logsumexp(torch.cat([logits, sink], dim=-1), dim=-1)
    else:
        lse = torch.logsumexp(logits, dim=-1)
    probs = _probabilities(logits, lse)
    keep = _dropout_keep(probs.shape, dropout_p, seed)
    if keep is not None:
        probs = probs * keep
    out = torch.matmul(probs, _acc(_expand_kv(v, q.shape[1])))
    return _new_out(q, v.shape[-1], q.dtype).copy_(out.transpose(1, 2)), lse


@flash_attention.register_fake
def _flash_attention_fake(q, k, v, sinks, indices, scale, causal, window, softcap, dropout_p, seed, bias=None):
    b, heads, s, _ = q.shape
    out = _new_out(q, v.shape[-1], q.dtype)
    lse = q.new_empty(b, heads, s, dtype=torch.promote_types(q.dtype, torch.float32))
    return out, lse


@torch.library.custom_op(f"{LIB}::flash_attention_backward", mutates_args=())
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
    dout = _acc(grad_out.transpose(1, 2))  # (b, h, s, dv)
    v_full = _acc(_expand_kv(v, heads))
    dropped = probs * keep if keep is not None else probs
    dv = _fold_kv(torch.matmul(dropped.transpose(-1, -2), dout), kv_heads)
    dprobs = torch.matmul(dout, v_full.transpose(-1, -2))
    if keep is not None:
        dprobs = dprobs * keep
    row = (probs * dprobs).sum(dim=-1, keepdim=True)
    dlogits = probs * (dprobs - row)
    if softcap > 0:
        dlogits = dlogits * (1.0 - torch.tanh(raw / softcap) ** 2)
    dq = torch.matmul(dlogits, _acc(_expand_kv(k, heads))) * scale
    dk = _fold_kv(torch.matmul(dlogits.transpose(-1, -2), _acc(q)) * scale, kv_heads)
    if sinks is not None:
        sink_probs = torch.exp(_acc(sinks).view(1, -1, 1) - lse)
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


# --------------------------------------------------------------------------- gated delta rule


def _l2norm(x: Tensor) -> tuple[Tensor, Tensor]:
    """x / sqrt(sum(x²) + 1e-6) over the last dim in fp32, and the fp32 inverse norm (no last dim)."""
    xf = _acc(x)
    rstd = torch.rsqrt((xf * xf).sum(dim=-1) + 1e-6)
    return (xf * rstd.unsqueeze(-1)).to(x.dtype), rstd


def _l2norm_backward(y: Tensor, rstd: Tensor, dy: Tensor) -> Tensor:
    """dx of y = x·r, r = (Σx² + eps)^-½: r·(dy − y·(dy·y))."""
    y, dy = _acc(y), _acc(dy)
    return rstd.unsqueeze(-1) * (dy - y * (dy * y).sum(dim=-1, keepdim=True))


def _normalised(q: Tensor, k: Tensor, l2norm_qk: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """q and k, l2-normalised when asked (else copies), and their fp32 inverse norms (ones when not)."""
    if l2norm_qk:
        (qn, q_rstd), (kn, k_rstd) = _l2norm(q), _l2norm(k)
        return qn, kn, q_rstd, k_rstd
    return q.clone(), k.clone(), _acc(q.new_ones(q.shape[:-1])), _acc(k.new_ones(k.shape[:-1]))


def _chunk_cumsum(x: Tensor, chunk: int) -> Tensor:
    """Cumulative sum along dim 1 restarted at every chunk of `chunk` positions (x is (b, s, h, ...))."""
    b, s, rest = x.shape[0], x.shape[1], x.shape[2:]
    padded = torch.cat([x, x.new_zeros(b, (-s) % chunk, *rest)], dim=1)
    return padded.view(b, -1, chunk, *rest).cumsum(2).reshape(b, -1, *rest)[:, :s].clone()  # its own storage, s positions


def _chunk_uncumsum(g_cum: Tensor, chunk: int) -> Tensor:
    """The per-token decay back from its chunk-local cumulative sum."""
    s = g_cum.shape[1]
    previous = torch.nn.functional.pad(g_cum, (0, 0, 1, 0))[:, :-1]
    starts = (torch.arange(s) % chunk == 0).view(1, s, 1)
    return torch.where(starts, g_cum, g_cum - previous)


def _per_head(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, scale: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """q, k repeated to v's heads (each key head serves consecutive value heads), all in the accumulation dtype."""
    groups = v.shape[2] // k.shape[2]
    return (
        _acc(q).repeat_interleave(groups, dim=2) * scale,
        _acc(k).repeat_interleave(groups, dim=2),
        _acc(v),
        _acc(beta),
    )


def _gate(decay_t: Tensor) -> Tensor:
    """The multiplicative decay of one token, shaped to scale a (b, h, dk, dv) state: one per
    head (b, h), or one per key channel (b, h, dk: Kimi delta attention's diagonal gate)."""
    e = torch.exp(decay_t)
    return e.unsqueeze(-1) if e.dim() == 3 else e.view(*e.shape, 1, 1)


def _delta_states(q, k, v, decay, beta) -> tuple[Tensor, list[Tensor]]:
    """The gated delta rule token by token (q already scaled, all per value head).

    State S (dk×dv) per head: S ← diag(e^{g_t})·S; S ← S + k_t ⊗ β_t(v_t − Sᵀk_t); o_t = Sᵀq_t,
    with g_t one per head (b, s, h) or one per key channel (b, s, h, dk).
    Returns the outputs (b, s, h, dv) and the states after each token (the first is the zero state).
    """
    b, s, heads, _ = v.shape
    states = [q.new_zeros(b, heads, k.shape[-1], v.shape[-1])]
    outputs = []
    for t in range(s):
        state = states[-1] * _gate(decay[:, t])
        delta = (v[:, t] - torch.einsum("bhkv,bhk->bhv", state, k[:, t])) * beta[:, t].unsqueeze(-1)
        state = state + torch.einsum("bhk,bhv->bhkv", k[:, t], delta)
        states.append(state)
        outputs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
    return torch.stack(outputs, dim=1), states


def _delta_grads(q, k, v, decay, beta, grad_out) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Reverse-time gradients of `_delta_states`' outputs for (q, k, v, decay, beta), per value head."""
    b, s, heads, _ = v.shape
    _, states = _delta_states(q, k, v, decay, beta)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    ddecay, dbeta = torch.zeros_like(decay), torch.zeros_like(beta)
    dstate = torch.zeros_like(states[0])
    for t in reversed(range(s)):
        kt, qt, do = k[:, t], q[:, t], grad_out[:, t]
        gate = _gate(decay[:, t])
        decayed = states[t] * gate
        delta_in = v[:, t] - torch.einsum("bhkv,bhk->bhv", decayed, kt)
        delta = delta_in * beta[:, t].unsqueeze(-1)
        # o_t = S_tᵀ q_t
        dq[:, t] = torch.einsum("bhkv,bhv->bhk", states[t + 1], do)
        dstate = dstate + torch.einsum("bhk,bhv->bhkv", qt, do)
        # S_t = S' + k_t ⊗ δ_t
        ddelta = torch.einsum("bhkv,bhk->bhv", dstate, kt)
        dk[:, t] = torch.einsum("bhkv,bhv->bhk", dstate, delta)
        # δ_t = β_t (v_t − S'ᵀ k_t)
        dv[:, t] = ddelta * beta[:, t].unsqueeze(-1)
        dbeta[:, t] = (ddelta * delta_in).sum(-1)
        dpred = -dv[:, t]
        dstate = dstate + torch.einsum("bhk,bhv->bhkv", kt, dpred)
        dk[:, t] += torch.einsum("bhkv,bhv->bhk", decayed, dpred)
        # S' = diag(e^{g_t}) S_{t-1}
        per_channel = (dstate * decayed).sum(dim=-1)
        ddecay[:, t] = per_channel if decay.dim() == 4 else per_channel.sum(dim=-1)
        dstate = dstate * gate
    return dq, dk, dv, ddecay, dbeta


def _fold_heads(grad: Tensor, kv_heads: int) -> Tensor:
    """Sum the gradients of value heads back onto the key head they share."""
    b, s, heads, d = grad.shape
    return grad.view(b, s, kv_heads, heads // kv_heads, d).sum(dim=3)


def _chunked(x: Tensor, chunk: int) -> Tensor:
    """(b, s, h, ...) → (b, n, h, chunk, ...): the positions in chunks, the last one zero-padded."""
    b, s, heads, rest = x.shape[0], x.shape[1], x.shape[2], x.shape[3:]
    padded = torch.cat([x, x.new_zeros(b, (-s) % chunk, heads, *rest)], dim=1)
    return padded.view(b, -1, chunk, heads, *rest).transpose(2, 3)


def _unchunked(x: Tensor, s: int) -> Tensor:
    """(b, n, h, chunk, chunk) → (b, s, h, chunk): one row of its chunk's matrix per position."""
    b, n, heads, chunk, _ = x.shape
    return x.permute(0, 1, 3, 2, 4).reshape(b, n * chunk, heads, chunk)[:, :s].clone()  # its own storage, s positions


def _chunk_scores(x: Tensor, y: Tensor, g_cum: Tensor, heads: int, chunk: int, strict: bool) -> Tensor:
    """Per chunk and value head, x_i·(y_j ⊙ e^{g_i − g_j}) for j before i (and j = i unless
    strict), else 0: (b, n, h, chunk, chunk). x and y (b, s, key heads, dk) serve consecutive
    value heads; g_cum, the chunk-local cumulative decay, is one per head (b, s, h) or one per
    key channel (b, s, h, dk)."""
    xc = _chunked(_acc(x).repeat_interleave(heads // x.shape[2], dim=2), chunk)
    yc = _chunked(_acc(y).repeat_interleave(heads // y.shape[2], dim=2), chunk)
    gc = _chunked(g_cum if g_cum.dim() == 4 else g_cum.unsqueeze(-1), chunk)
    allowed = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool), diagonal=-1 if strict else 0)
    decay = torch.exp((gc.unsqueeze(-2) - gc.unsqueeze(-3)).masked_fill(~allowed.unsqueeze(-1), 0.0))
    return (xc.unsqueeze(-2) * yc.unsqueeze(-3) * decay).sum(-1).masked_fill(~allowed, 0.0)


def _wy_matrix(k: Tensor, g_cum: Tensor, beta: Tensor, heads: int, chunk: int) -> Tensor:
    """Per chunk, A = (I + strictly-lower(β_i·k_i·(k_j ⊙ e^{g_i − g_j})))⁻¹, laid out (b, s, h, chunk)."""
    gram = _chunked(_acc(beta), chunk).unsqueeze(-1) * _chunk_scores(k, k, g_cum, heads, chunk, strict=True)
    eye = torch.eye(chunk, dtype=gram.dtype)
    inverse = torch.linalg.solve_triangular(eye + gram, eye.expand_as(gram), upper=False, unitriangular=True)
    return _unchunked(inverse, k.shape[1])


@torch.library.custom_op(f"{LIB}::chunk_gated_delta_rule", mutates_args=())
def chunk_gated_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float, l2norm_qk: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Gated delta rule over q, k (b, s, kv_heads, dk), v (b, s, heads, dv), decay g and beta (b, s, heads).

    Returns the output (b, s, heads, dv) in v's dtype, then what backward keeps: q and k
    (normalised when `l2norm_qk`), their fp32 inverse norms (b, s, kv_heads), the fp32
    chunk-local cumulative decay and the WY matrix A (b, s, heads, 64) in k's dtype.
    """
    qn, kn, q_rstd, k_rstd = _normalised(q, k, l2norm_qk)
    g_cum = _chunk_cumsum(_acc(g), DELTA_CHUNK)
    out = _delta_states(*_per_head(qn, kn, v, beta, scale)[:3], _acc(g), _acc(beta))[0].to(v.dtype)
    wy = _wy_matrix(kn, g_cum, beta, v.shape[2], DELTA_CHUNK).to(k.dtype)
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


@torch.library.custom_op(f"{LIB}::chunk_gated_delta_rule_backward", mutates_args=())
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
    q, k, v_acc, beta_acc = _per_head(qn, kn, v, beta, scale)
    dq, dk, dv, dg, dbeta = _delta_grads(q, k, v_acc, _chunk_uncumsum(g_cum, DELTA_CHUNK), beta_acc, _acc(grad_out))
    kv_heads = kn.shape[2]
    dqn, dkn = _fold_heads(dq, kv_heads) * scale, _fold_heads(dk, kv_heads)
    if l2norm_qk:
        dq, dk = _l2norm_backward(qn, q_rstd, dqn), _l2norm_backward(kn, k_rstd, dkn)
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


# --------------------------------------------------------------------------- causal conv1d


def _causal_conv1d_ref(x: Tensor, weight: Tensor, bias: Tensor | None, silu: bool) -> Tensor:
    """Depthwise causal convolution of x (b, channels, s) with weight (channels, width), then SiLU."""
    out = torch.nn.functional.conv1d(x, weight.unsqueeze(1), bias, padding=weight.shape[-1] - 1, groups=x.shape[1])[..., : x.shape[-1]]
    return torch.nn.functional.silu(out) if silu else out


@torch.library.custom_op(f"{LIB}::causal_conv1d", mutates_args=())
def causal_conv1d(x: Tensor, weight: Tensor, bias: Tensor | None, silu: bool) -> Tensor:
    """The causal-conv1d kernel: x (b, channels, s), weight (channels, width), optional bias and SiLU."""
    return _causal_conv1d_ref(_acc(x), _acc(weight), None if bias is None else _acc(bias), silu).to(x.dtype)


@causal_conv1d.register_fake
def _causal_conv1d_fake(x, weight, bias, silu):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _conv_setup(ctx, inputs, output):
    x, weight, bias, silu = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.silu = silu


def _conv_backward(ctx, grad_out):
    x, weight, bias = ctx.saved_tensors
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(True) if t is not None else None for t in (x, weight, bias)]
        # in the accumulation dtype, as the forward: x and the weights may differ in dtype
        # (bailing_hybrid's fp32 conv weights on bf16 activations); each gradient in its input's dtype
        out = _causal_conv1d_ref(*(_acc(t) if t is not None else None for t in leaves), ctx.silu)
        wanted = [t for t in leaves if t is not None]
        grads = iter(torch.autograd.grad(out, wanted, grad_out.to(out.dtype)))
    return tuple(next(grads) if t is not None else None for t in leaves) + (None,)


causal_conv1d.register_autograd(_conv_backward, setup_context=_conv_setup)
