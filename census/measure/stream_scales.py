"""Products with a per-channel scale: a tensor of the tokens times a parameter, or a tensor
computed from parameters alone (the same for every token: the watcher follows every op whose
inputs are all parameters, buffers or such tensors, Watcher.param_derived), which keeps its
other factor for backward where the scale needs a gradient.

On the stream, in the layer's own code (between its children, in no module): doge's
`input_residual * residual` and `post_attention_residual * residual`, a learned scale on the
residual before each branch is added to it; dory's `abs(λ·scale) * (out − h)`, the rate at
which its residual moves towards each branch's output; mllama's cross-attention layer's
`tanh(gate) * out` after each branch. The product keeps its other factor (the residual; the
difference; the branch's output), a storage no child keeps where the stream norms upcast.

Inside a child, outside its norms: dory's q after rope times sqk², and its MLP's gate_proj and
up_proj outputs times suv_gate and suv_up. A factor on an output gate's chain (dory's gate_proj
output times s_gate², before its sigmoid: census/measure/output_gates.py) is the gate's, and
not counted here.

The watcher hands every product here (census/measure/op_notes.py); a product of that kind whose
factor it was the first to save notes the factor's storage (Watcher.stream_scaled,
Watcher.channel_scaled), and booking adds the bytes of each such storage still kept by it to
the op it is booked to (LayerProbe.stream_scale_kept: the child's that ran last; and
LayerProbe.channel_scale_kept, by dtype), which the variant facts `stream_scale_attn_bytes`,
`stream_scale_ff_bytes`, `attn_scaled_kept` and `ff_scaled_kept` read.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_leaves

from speccat.census.kernels.scope import current_kernel
from speccat.census.measure.repeated_attention import holds_kernel_outputs
from speccat.census.structure.kernel_registry import storage_key
from speccat.census.structure.predicates import is_norm


def _from_parameters(watcher, tensor: torch.Tensor) -> bool:
    """`tensor` is a parameter or buffer (a view of one too), or was computed from them alone."""
    key = storage_key(tensor)
    return key in watcher.excluded or key in watcher.param_derived


def note_param_derived(watcher, probe, func, args, kwargs, out) -> None:
    """Any op (outside a kernel) whose tensor inputs are all parameters, buffers or tensors
    computed from them alone: its outputs are computed from parameters alone, the same for every
    token (dory's sqk·scale and its square, abs(λ·scale); held, so their identities stay theirs)."""
    inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    if not inputs or not all(_from_parameters(watcher, t) for t in inputs):
        return
    for tensor in tree_leaves(out):
        if isinstance(tensor, torch.Tensor):
            watcher.param_derived.add(storage_key(tensor))
            watcher.kept.append(tensor.untyped_storage())


def _scaled_factor(watcher, args, out) -> torch.Tensor | None:
    """Of a product of two tensors, one computed from parameters alone that needs a gradient
    (so the product keeps the other) and one that is not: that other factor, when this product
    saved it first (no other op keeps it) and it is no attention kernel's output nor a join of
    them (`attn_out_joined`'s: diffllama's λ times the second half of its join); else None."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if len(tensors) != 2 or not isinstance(out, torch.Tensor):
        return None
    scales = [t for t in tensors if _from_parameters(watcher, t)]
    factors = [t for t in tensors if not _from_parameters(watcher, t)]
    if len(scales) != 1 or len(factors) != 1 or not scales[0].requires_grad:
        return None
    key = storage_key(factors[0])
    saved = len(watcher.seen.get(key, ())) == 1  # autograd saved it for this product, and nothing before
    return factors[0] if saved and not holds_kernel_outputs(watcher, key) else None


def note_stream_scale(watcher, probe, func, args, kwargs, out) -> None:
    """A product in the layer's own code of a hidden-width tensor with a per-channel scale of
    that width (a parameter: doge's; or computed from parameters: dory's abs(λ·scale)), or inside
    a child outside its norms of any tensor with such a scale: its factor noted when this
    product saved it first."""
    if current_kernel() is not None or not probe.hidden_width or not probe.tokens:
        return
    factor = _scaled_factor(watcher, args, out)
    if factor is None:
        return
    if not watcher.path:
        if out.shape[-1] == probe.hidden_width and factor.shape[-1] == probe.hidden_width:
            watcher.stream_scaled.add(storage_key(factor))
    elif not any(is_norm(module) for _, module in watcher.path):
        watcher.channel_scaled.add(storage_key(factor))


def book_stream_scale(watcher, probe, key: int, saver: int, op: str, nbytes: int) -> None:
    """A kept storage booked to `op` by its saver number `saver`: a scaled factor's, kept by its
    product (the first saver), adds its bytes to that op's; one inside a child, by dtype, unless
    it lies on an output gate's chain."""
    if saver != 0:
        return
    if key in watcher.stream_scaled:
        probe.stream_scale_kept[op] += nbytes
    elif key in watcher.channel_scaled and probe.gate_holding(key) is None:
        probe.channel_scale_kept[(op, watcher.tails[key][1])] += nbytes
