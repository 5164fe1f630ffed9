"""The selective scan token by token, shared by Mamba's fused mixer (census/kernels/mamba_inner.py)
and the scan called apart from its conv (census/kernels/scan_apart.py): its output and the
chunk states mamba_ssm's kernel keeps, one per SCAN_CHUNK tokens.

The census runs the kernels on fake tensors, where only shapes count (`scan_chunks` sizes the
kept states); the scan makes their real CPU implementations correct, so the tests can check them.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

SCAN_CHUNK = 2048  # the selective-scan kernel's chunk: it keeps one state per chunk of this many tokens


def selective_scan(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None) -> tuple[Tensor, Tensor]:
    """The selective scan token by token: u, delta (b, d, s), A (d, n), B, C (b, s, n).

    h_t = exp(Δ_t·A)·h_{t-1} + Δ_t·B_t·u_t; y_t = C_t·h_t + D·u_t. Returns y (b, d, s) and the
    chunk states (b, d, chunks, 2n): the decay product over the chunk and the state at its end.
    """
    b, d, s = u.shape
    state = u.new_zeros(b, d, A.shape[1])
    decay = torch.ones_like(state)
    outputs, chunks = [], []
    for t in range(s):
        step = torch.exp(delta[:, :, t, None] * A)
        state = step * state + delta[:, :, t, None] * B[:, t, None, :] * u[:, :, t, None]
        decay = step * decay
        outputs.append((state * C[:, t, None, :]).sum(-1))
        if (t + 1) % SCAN_CHUNK == 0 or t == s - 1:
            chunks.append(torch.cat([decay, state], dim=-1))
            decay = torch.ones_like(state)
    y = torch.stack(outputs, dim=-1)
    if D is not None:
        y = y + D[None, :, None] * u
    return y, torch.stack(chunks, dim=2)


def scan_chunks(s: int) -> int:
    """The chunk states the kernel keeps for s tokens: one per SCAN_CHUNK, the last one partial."""
    return math.ceil(s / SCAN_CHUNK)
