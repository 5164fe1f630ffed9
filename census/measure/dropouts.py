"""Dropouts seen in a probed layer's forward: each call that drops something counted, and its mask
booked at its CUDA bytes (a bool per element, where the CPU kernel keeps another dtype)."""

from __future__ import annotations

import torch

from speccat.census.kernels.scope import current_kernel
from speccat.census.structure.kernel_registry import storage_key

# The dropout ops, each with how to read the probability it keeps an element with.
DROPOUT_OPS = {
    torch.ops.aten.bernoulli_.float: lambda args, kwargs: args[1] if len(args) > 1 else kwargs.get("p", 0.5),
    torch.ops.aten.native_dropout.default: lambda args, kwargs: 1.0 - args[1],
}
# The dtype of a dropout mask on CUDA.
CUDA_MASK_DTYPE = torch.bool


def note_dropout(watcher, probe, func, args, kwargs, out) -> None:
    """A dropout outside any kernel that drops something: counted on the probe, its mask booked
    as a dropout's (watcher.dropout_storages) at its CUDA bytes."""
    if current_kernel() is not None:
        return
    keep = DROPOUT_OPS[func](args, kwargs)
    if keep < 1.0:
        probe.dropouts += 1
        mask = args[0] if func is torch.ops.aten.bernoulli_.float else out[1]
        key = storage_key(mask)
        watcher.dropout_storages.add(key)
        watcher.cuda_nbytes[key] = mask.numel() * CUDA_MASK_DTYPE.itemsize
        watcher.cuda_dtypes[key] = CUDA_MASK_DTYPE
        watcher.kept.append(mask.untyped_storage())  # alive, so no later storage can take its identity
