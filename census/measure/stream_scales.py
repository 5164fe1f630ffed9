"""Products the layer's own code (between its children, in no module) takes of a tensor of the
hidden width with a per-channel parameter: doge's `input_residual * residual` and
`post_attention_residual * residual`, a learned scale on the residual before each branch is
added to it. The product keeps its other factor (the residual: the layer's input, then the sum
after the attention), a storage no child keeps where the stream norms upcast.

The watcher hands every product here (census/measure/op_notes.py); a product of that kind whose
factor it was the first to save notes the factor's storage (Watcher.stream_scaled), and booking
adds the bytes of each such storage still kept by it to the op it is booked to, the child's that
ran last (LayerProbe.stream_scale_kept), which the variant facts `stream_scale_attn_bytes` and
`stream_scale_ff_bytes` read.
"""

from __future__ import annotations

import torch

from speccat.census.kernels.scope import current_kernel
from speccat.census.structure.kernel_registry import storage_key


def note_stream_scale(watcher, probe, func, args, kwargs, out) -> None:
    """A product in the layer's own code of one tensor with a parameter vector of its width, the
    hidden width: its factor noted when this product saved it first (no other op keeps it)."""
    if watcher.path or current_kernel() is not None or not isinstance(out, torch.Tensor) or not probe.hidden_width:
        return
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    params = [t for t in tensors if storage_key(t) in watcher.excluded and t.dim() == 1]
    factors = [t for t in tensors if storage_key(t) not in watcher.excluded]
    if len(tensors) != 2 or len(params) != 1 or len(factors) != 1:
        return
    if params[0].shape[-1] != probe.hidden_width or out.shape[-1] != probe.hidden_width:
        return
    key = storage_key(factors[0])
    if len(watcher.seen.get(key, ())) == 1:  # autograd saved it for this product, and nothing before
        watcher.stream_scaled.add(key)


def book_stream_scale(watcher, probe, key: int, saver: int, op: str, nbytes: int) -> None:
    """A kept storage booked to `op` by its saver number `saver`: a scaled factor's, kept by its
    product (the first saver), adds its bytes to that op's."""
    if key in watcher.stream_scaled and saver == 0:
        probe.stream_scale_kept[op] += nbytes
