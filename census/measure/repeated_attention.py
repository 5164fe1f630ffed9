"""A layer that calls its attention kernel more than once and joins what the calls return:
diffllama's differential attention calls the kernel twice with the same q and k (over the two
halves of v), joins the two outputs with torch.cat and multiplies one half of the join by a
learned λ, a product whose backward keeps the join whole.

What such a layer keeps differs from one kernel call's share times the calls in two ways, each
read here off what ran: the kernel keeps q and k once however many calls read them (the
probe notes each call's q and k storages, LayerProbe.query_key_storages, which the variant fact
`qk_reused` reads); and a join of kernel outputs kept by an op after the kernels is a tensor
the kernels do not keep (the watcher notes each kernel's output and each torch.cat of kernel
outputs alone, and booking counts the outputs held in joins backward keeps,
LayerProbe.joined_outputs_kept, which the variant fact `attn_out_joined` reads).
"""

from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from speccat.census.kernels.scope import current_kernel
from speccat.census.structure.kernel_registry import Kernel, storage_key

CAT_OP = torch.ops.aten.cat.default


def kernel_called(watcher, probe, kernel: Kernel, args: tuple, out) -> None:
    """A kernel taking values ran: the storages of its arguments before v (an attention's q and
    k) noted for the call, and its output's storage as a kernel output."""
    if kernel.value_arg is None:
        return
    probe.query_key_storages.append(tuple(storage_key(a) for a in args[: kernel.value_arg] if isinstance(a, torch.Tensor)))
    first = out[0] if isinstance(out, (tuple, list)) and out else out
    if isinstance(first, torch.Tensor):
        _note(watcher, first, 1)


def note_join(watcher, probe, func, args, kwargs, out) -> None:
    """A torch.cat outside any kernel of two or more tensors, each a kernel's output or a join of
    them (views included): its output a join holding their outputs."""
    if current_kernel() is not None or not args or not isinstance(out, torch.Tensor):
        return
    parts = [t for t in args[0] if isinstance(t, torch.Tensor)]
    held = [_outputs_held(watcher, storage_key(t)) for t in parts]
    if len(parts) > 1 and all(held):
        _note(watcher, out, sum(held))


def book_join(watcher, probe, key: int, op: str) -> None:
    """A kept storage booked to `op`: a join of kernel outputs kept outside the kernels (the
    kernel's own output, kept by the kernel, is booked to its own op and counted by no fact)."""
    held = _outputs_held(watcher, key)
    if held > 1 and op.startswith("child:"):
        probe.joined_outputs_kept += held


def holds_kernel_outputs(watcher, key: int) -> bool:
    """The live storage `key` is a kernel's output or a join of them (which `attn_out_joined`
    counts where an op after the kernels keeps it)."""
    return _outputs_held(watcher, key) > 0


def _note(watcher, tensor: torch.Tensor, outputs: int) -> None:
    """`tensor`'s storage holds that many kernel outputs (a weak reference kept: a storage freed
    and its identity reused holds none)."""
    watcher.joined_outputs[storage_key(tensor)] = (outputs, StorageWeakRef(tensor.untyped_storage()))


def _outputs_held(watcher, key: int) -> int:
    """The kernel outputs the live storage `key` holds, 0 for none."""
    outputs, ref = watcher.joined_outputs.get(key, (0, None))
    return 0 if ref is None or ref.expired() else outputs
