"""The gated delta rule's math, shared by its two kernels: the gate one per head
(census/kernels/delta_rule.py) and one per key channel (census/kernels/kda.py, Kimi delta
attention).

The recurrence token by token in fp32 (its outputs and states), its reverse-time gradients, the
l2 norm of q and k, and the chunk-local quantities flash-linear-attention keeps: the cumulative
decay within each chunk of DELTA_CHUNK tokens, the intra-chunk scores and the WY matrix. The
census runs the kernels on fake tensors, where only shapes count; this math makes their real CPU
implementations correct, so the tests can check them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from speccat.census.kernels.tensors import acc

DELTA_CHUNK = 64  # flash-linear-attention's chunk length; A holds one row of this width per token


def _l2norm(x: Tensor) -> tuple[Tensor, Tensor]:
    """x / sqrt(sum(x²) + 1e-6) over the last dim in fp32, and the fp32 inverse norm (no last dim)."""
    xf = acc(x)
    rstd = torch.rsqrt((xf * xf).sum(dim=-1) + 1e-6)
    return (xf * rstd.unsqueeze(-1)).to(x.dtype), rstd


def l2norm_backward(y: Tensor, rstd: Tensor, dy: Tensor) -> Tensor:
    """dx of y = x·r, r = (Σx² + eps)^-½: r·(dy − y·(dy·y))."""
    y, dy = acc(y), acc(dy)
    return rstd.unsqueeze(-1) * (dy - y * (dy * y).sum(dim=-1, keepdim=True))


def normalised(q: Tensor, k: Tensor, l2norm_qk: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """q and k, l2-normalised when asked (else copies), and their fp32 inverse norms (ones when not)."""
    if l2norm_qk:
        (qn, q_rstd), (kn, k_rstd) = _l2norm(q), _l2norm(k)
        return qn, kn, q_rstd, k_rstd
    return q.clone(), k.clone(), acc(q.new_ones(q.shape[:-1])), acc(k.new_ones(k.shape[:-1]))


def chunk_cumsum(x: Tensor, chunk: int) -> Tensor:
    """Cumulative sum along dim 1 restarted at every chunk of `chunk` positions (x is (b, s, h, ...))."""
    b, s, rest = x.shape[0], x.shape[1], x.shape[2:]
    padded = torch.cat([x, x.new_zeros(b, (-s) % chunk, *rest)], dim=1)
    return padded.view(b, -1, chunk, *rest).cumsum(2).reshape(b, -1, *rest)[:, :s].clone()  # its own storage, s positions


def chunk_uncumsum(g_cum: Tensor, chunk: int) -> Tensor:
    """The per-token decay back from its chunk-local cumulative sum."""
    s = g_cum.shape[1]
    previous = torch.nn.functional.pad(g_cum, (0, 0, 1, 0))[:, :-1]
    starts = (torch.arange(s) % chunk == 0).view(1, s, 1)
    return torch.where(starts, g_cum, g_cum - previous)


def per_head(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, scale: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """q, k repeated to v's heads (each key head serves consecutive value heads), all in the accumulation dtype."""
    groups = v.shape[2] // k.shape[2]
    return (
        acc(q).repeat_interleave(groups, dim=2) * scale,
        acc(k).repeat_interleave(groups, dim=2),
        acc(v),
        acc(beta),
    )


def _gate(decay_t: Tensor) -> Tensor:
    """The multiplicative decay of one token, shaped to scale a (b, h, dk, dv) state: one per
    head (b, h), or one per key channel (b, h, dk: Kimi delta attention's diagonal gate)."""
    e = torch.exp(decay_t)
    return e.unsqueeze(-1) if e.dim() == 3 else e.view(*e.shape, 1, 1)


def delta_states(q, k, v, decay, beta) -> tuple[Tensor, list[Tensor]]:
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


def delta_grads(q, k, v, decay, beta, grad_out) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Reverse-time gradients of `delta_states`' outputs for (q, k, v, decay, beta), per value head."""
    b, s, heads, _ = v.shape
    _, states = delta_states(q, k, v, decay, beta)
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


def fold_heads(grad: Tensor, kv_heads: int) -> Tensor:
    """Sum the gradients of value heads back onto the key head they share."""
    b, s, heads, d = grad.shape
    return grad.view(b, s, kv_heads, heads // kv_heads, d).sum(dim=3)


def _chunked(x: Tensor, chunk: int) -> Tensor:
    """(b, s, h, ...) → (b, n, h, chunk, ...): the positions in chunks, the last one zero-padded."""
    b, s, heads, rest = x.shape[0], x.shape[1], x.shape[2], x.shape[3:]
    padded = torch.cat([x, x.new_zeros(b, (-s) % chunk, heads, *rest)], dim=1)
    return padded.view(b, -1, chunk, heads, *rest).transpose(2, 3)


def unchunked(x: Tensor, s: int) -> Tensor:
    """(b, n, h, chunk, chunk) → (b, s, h, chunk): one row of its chunk's matrix per position."""
    b, n, heads, chunk, _ = x.shape
    return x.permute(0, 1, 3, 2, 4).reshape(b, n * chunk, heads, chunk)[:, :s].clone()  # its own storage, s positions


def chunk_scores(x: Tensor, y: Tensor, g_cum: Tensor, heads: int, chunk: int, strict: bool) -> Tensor:
    """Per chunk and value head, x_i·(y_j ⊙ e^{g_i − g_j}) for j before i (and j = i unless
    strict), else 0: (b, n, h, chunk, chunk). x and y (b, s, key heads, dk) serve consecutive
    value heads; g_cum, the chunk-local cumulative decay, is one per head (b, s, h) or one per
    key channel (b, s, h, dk)."""
    xc = _chunked(acc(x).repeat_interleave(heads // x.shape[2], dim=2), chunk)
    yc = _chunked(acc(y).repeat_interleave(heads // y.shape[2], dim=2), chunk)
    gc = _chunked(g_cum if g_cum.dim() == 4 else g_cum.unsqueeze(-1), chunk)
    allowed = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool), diagonal=-1 if strict else 0)
    decay = torch.exp((gc.unsqueeze(-2) - gc.unsqueeze(-3)).masked_fill(~allowed.unsqueeze(-1), 0.0))
    return (xc.unsqueeze(-2) * yc.unsqueeze(-3) * decay).sum(-1).masked_fill(~allowed, 0.0)


def wy_matrix(k: Tensor, g_cum: Tensor, beta: Tensor, heads: int, chunk: int) -> Tensor:
    """Per chunk, A = (I + strictly-lower(β_i·k_i·(k_j ⊙ e^{g_i − g_j})))⁻¹, laid out (b, s, h, chunk)."""
    gram = _chunked(acc(beta), chunk).unsqueeze(-1) * chunk_scores(k, k, g_cum, heads, chunk, strict=True)
    eye = torch.eye(chunk, dtype=gram.dtype)
    inverse = torch.linalg.solve_triangular(eye + gram, eye.expand_as(gram), upper=False, unitriangular=True)
    return unchunked(inverse, k.shape[1])
