"""Tensor math several kernels' real CPU implementations share: the accumulation dtype and the
depthwise causal convolution (the causal-conv1d kernel's, also run inside Mamba's and Mamba2's
fused mixers).

The census runs the kernels on fake tensors, where only shapes count; these give the real CPU
implementations the same results as the production kernels, so the tests can check them.
"""

from __future__ import annotations

import torch
from torch import Tensor


def acc(x: Tensor) -> Tensor:
    """x in the accumulation dtype: fp32 for half types, as kernels accumulate (fp64 stays fp64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def causal_conv1d_reference(x: Tensor, weight: Tensor, bias: Tensor | None, silu: bool) -> Tensor:
    """Depthwise causal convolution of x (b, channels, s) with weight (channels, width), then SiLU."""
    out = torch.nn.functional.conv1d(x, weight.unsqueeze(1), bias, padding=weight.shape[-1] - 1, groups=x.shape[1])[..., : x.shape[-1]]
    return torch.nn.functional.silu(out) if silu else out
