"""The CUDA widths of storages the CPU kernels the probe runs keep otherwise: a LayerNorm's mean
and rstd, kept in the input's dtype on CPU and in the accumulation dtype (fp32 for half inputs)
on CUDA, and log_sigmoid's buffer, which the CPU kernel fills and CUDA leaves empty.

The watcher (census/measure/watcher.py) books such a storage at its CUDA bytes; the model's ends
(census/measure/ends.py) do too.
"""

from __future__ import annotations

import torch

from speccat.census.structure.kernel_registry import storage_key

LAYER_NORM_OPS = {torch.ops.aten.native_layer_norm.default}
# Outputs a CPU kernel fills that the CUDA kernel leaves empty, by op and output position:
# log_sigmoid's buffer (exp(−|x|), which the CUDA backward recomputes; torch's own decomposition
# of log_sigmoid_forward makes it empty on CUDA), kept by its backward: 0 bytes on CUDA.
EMPTY_ON_CUDA = {torch.ops.aten.log_sigmoid_forward.default: 1}


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32) if dtype.is_floating_point else dtype


def layer_norm_stats_cuda_nbytes(func, args, out) -> dict[int, int]:
    """A LayerNorm call's mean and rstd storages → their bytes in CUDA's accumulation dtype
    (the CPU kernel keeps them in the input's dtype); empty for any other op."""
    if func not in LAYER_NORM_OPS:
        return {}
    return {storage_key(stat): stat.numel() * _acc_dtype(args[0].dtype).itemsize for stat in out[1:]}


def note_layer_norm_stats(watcher, probe, func, args, kwargs, out) -> None:
    """A LayerNorm's statistics: booked at their CUDA bytes, held alive so no later storage takes their identity."""
    watcher.cuda_nbytes.update(layer_norm_stats_cuda_nbytes(func, args, out))
    watcher.cuda_dtypes.update({storage_key(stat): _acc_dtype(args[0].dtype) for stat in out[1:]})
    watcher.kept.extend(stat.untyped_storage() for stat in out[1:])


def note_empty_on_cuda(watcher, probe, func, args, kwargs, out) -> None:
    """An output CUDA leaves empty (EMPTY_ON_CUDA): booked at 0 bytes, held alive so no later storage takes its identity."""
    buffer = out[EMPTY_ON_CUDA[func]]
    watcher.cuda_nbytes[storage_key(buffer)] = 0
    watcher.kept.append(buffer.untyped_storage())  # alive, so no later storage can take its identity
