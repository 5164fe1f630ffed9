"""Score biases gathered from a per-query table: each gather outside a kernel whose output's last
two dims are square, noted with its child, its source's shape and element bytes and its output's
shape (LayerProbe.score_gathers)."""

from __future__ import annotations

import torch

from speccat.census.kernels.scope import current_kernel

GATHER_OP = torch.ops.aten.gather.default


def note_score_gather(watcher, probe, func, args, kwargs, out) -> None:
    """A gather outside any kernel with a square output: one score gather of the child running."""
    if current_kernel() is None and out.dim() >= 2 and out.shape[-1] == out.shape[-2]:
        probe.score_gathers.append((watcher.child(), tuple(args[0].shape), args[0].element_size(), tuple(out.shape)))
