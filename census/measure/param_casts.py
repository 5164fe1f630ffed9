"""Casts of a parameter that backward keeps: code that casts a half weight to fp32 before its
matmul (kolibri1's router, F.linear(x.float(), weight.float())) makes a copy of the weight, and
the matmul keeps that copy for its input's gradient: one copy a layer call, whatever the tokens.

Each such cast outside a kernel is noted with the child that ran it and the parameter's shape
and the cast's dtype (watcher.param_casts); booking (census/measure/booking.py) counts those
backward keeps on the probe (LayerProbe.param_casts_kept).
"""

from __future__ import annotations

import torch

from speccat.census.kernels.scope import current_kernel
from speccat.census.structure.kernel_registry import storage_key

CAST_OP = torch.ops.aten._to_copy.default


def note_param_cast(watcher, probe, func, args, kwargs, out) -> None:
    """A cast of a parameter (or buffer) to another dtype, or of such a cast again (ergo's
    router: its fp32 weight cast to the branch's bf16, then back to fp32 for the matmul), outside
    any kernel: its output noted with (the child running, the parameter's shape, the cast's
    dtype), and held alive so no later storage takes its identity."""
    source = args[0] if args else None
    if current_kernel() is not None or not isinstance(source, torch.Tensor) or out.dtype == source.dtype:
        return
    key = storage_key(source)
    if key in watcher.excluded or key in watcher.param_casts:
        watcher.param_casts[storage_key(out)] = (watcher.child(), tuple(source.shape), out.dtype)
        watcher.kept.append(out.untyped_storage())
