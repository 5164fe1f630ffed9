"""The scores of a softmax attention run as the model's own eager code (census/kernels/attention.py
`_as_written`): the columns its softmax ran over, noted on the attention's call
(KernelCall.score_columns), and the casts of its output to the compute dtype (the probabilities
the product with v reads), which the watcher books to headCast (a cast of the attention scores)
as the records price them.

A softmax over more columns than the keys is one over logits concatenated beside the scores
(inkling2's per-query sinks: one column), which its fp32 output keeps too; reading the columns
off the softmax that ran, not off the sinks' argument, prices any eager code that widens its
scores alike.
"""

from __future__ import annotations

import torch

from speccat.census.kernels import attention
from speccat.census.kernels.scope import current_kernel
from speccat.census.structure.kernel_registry import storage_key

SOFTMAX_OPS = (torch.ops.aten._softmax.default, torch.ops.aten.softmax.int)
CAST_OP = torch.ops.aten._to_copy.default


def in_eager_attention() -> bool:
    """A softmax attention runs as the model's eager code now (its kernel scope)."""
    return current_kernel() == attention.EAGER_ATTENTION


def note_softmax(watcher, probe, func, args, kwargs, out) -> None:
    """A softmax in the eager attention's scope: its output noted (watcher.eager_scores), and its
    columns (the output's last dim) on the layer's last attention call, the one running (the
    watcher books it before the eager code runs)."""
    if not in_eager_attention() or not isinstance(out, torch.Tensor):
        return
    watcher.eager_scores.add(storage_key(out))
    watcher.kept.append(out.untyped_storage())
    call = next((k for k in reversed(probe.kernels) if k.kind == "attention" and k.eager), None)
    if call is not None:
        call.score_columns = max(call.score_columns, int(out.shape[-1]))


def note_cast(watcher, probe, func, args, kwargs, out) -> None:
    """A dtype cast in the eager attention's scope of the softmax's output (or a view of it, the
    sinks' column sliced off): the probabilities the product with v reads, noted
    (watcher.score_casts) for the watcher to book to headCast."""
    if not in_eager_attention() or not isinstance(args[0], torch.Tensor) or not isinstance(out, torch.Tensor):
        return
    if storage_key(args[0]) in watcher.eager_scores and out.dtype != args[0].dtype:
        watcher.score_casts.add(storage_key(out))
        watcher.kept.append(out.untyped_storage())
