"""The backward peak: per probed layer, the most bytes alive at any moment of its backward beyond
those alive when its backward began (docs/census.md, "The backward peak").

When a layer's backward begins, what it saved, the gradient it receives and everything else
alive (the saves of the layers before it, the parameters) are there already; what its backward
adds on top is the gradients it forms (its working set) less the saves it has used and freed.
Under a switch set, torch's checkpoint re-runs the recomputed ops when the layer's backward
first reads a save, so their outputs come on top too: that part is the records' own price of
what the set recomputes, and the census measures the working set with nothing recomputed.

The layer's backward is the stretch from the moment the gradient of its output is ready (a hook
on the output tensor) to the moment the gradient of its input is (a hook on the input tensor).
Between them every op's new storages are followed (a TorchDispatchMode, weak references), and
so are the saves: a saved storage counts while a graph node still holds it (the watcher's
holders, census/measure/watcher.py), since autograd frees a node's saves once the node has run.
The weights' own gradients are not asked for (the probe's backward runs to the stack's input
only): under Megatron-LM's gradient-accumulation fusion they are summed into the fp32 main
gradient in place, which the model states already hold.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from speccat.census.measure.watcher import Watcher
from speccat.census.structure.kernel_registry import storage_key


class BackwardPeak(TorchDispatchMode):
    """Follows what is alive during the backward and, per layer index, the most beyond its start (`peaks`)."""

    def __init__(self, watcher: Watcher):
        super().__init__()
        self.watcher = watcher
        self.made: dict[int, tuple[StorageWeakRef, int]] = {}  # storages the backward made -> (weak ref, bytes)
        self.saved = 0  # bytes of the saves a graph node still holds
        self.window: tuple[int, int] | None = None  # (layer index, bytes alive when its backward began)
        self.peaks: dict[int, int] = {}

    def __enter__(self):
        """Count the saves still held, each lowered from the total when the last node holding it frees it."""
        for savers in self.watcher.seen.values():
            holders = [holder for holder in (held() for _, _, _, held, _ in savers) if holder is not None]
            if holders:
                nbytes, left = savers[0][2], [len(holders)]
                self.saved += nbytes
                for holder in holders:
                    weakref.finalize(holder, self._released, left, nbytes)
        return super().__enter__()

    def _released(self, left: list[int], nbytes: int) -> None:
        left[0] -= 1
        if left[0] == 0:
            self.saved -= nbytes

    def alive(self) -> int:
        """The bytes alive now of what the forward saved and the backward made."""
        for key in [k for k, (ref, _) in self.made.items() if ref.expired()]:
            del self.made[key]
        return self.saved + sum(nbytes for _, nbytes in self.made.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.index_put.default and storage_key(args[0]) in self.made:
            # the index's backward fills zeros it made with the gradient: in place on plain
            # tensors, out of place on tensors it takes for a subclass (fake tensors, any tensor
            # while a dispatch mode runs); counted as the plain run fills them, the copy in the zeros' place
            self.made[storage_key(out)] = (StorageWeakRef(out.untyped_storage()), self.made.pop(storage_key(args[0]))[1])
        given = {storage_key(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):  # a view or an in-place op's output is its input's storage: nothing new
                key = storage_key(tensor)
                if key not in given and key not in self.made:
                    self.made[key] = (StorageWeakRef(tensor.untyped_storage()), tensor.untyped_storage().nbytes())
        if self.window is not None:
            index, start = self.window
            self.peaks[index] = max(self.peaks.get(index, 0), self.alive() - start)
        return out

    def begin(self, index: int) -> None:
        self.window = (index, self.alive())
        self.peaks.setdefault(index, 0)

    def end(self, index: int) -> None:
        if self.window is not None and self.window[0] == index:
            self.window = None

    def windows(self, layers: dict[int, nn.Module]) -> contextlib.AbstractContextManager:
        """backward_windows over `layers`, opening and closing this mode's windows."""
        return backward_windows(layers, self.begin, self.end)


@contextlib.contextmanager
def backward_windows(layers: dict[int, nn.Module], begin: Callable[[int], None], end: Callable[[int], None]) -> Iterator[None]:
    """Hooks, while the forward runs, that call `begin(index)` when the gradient of layer
    `index`'s hidden output is ready and `end(index)` when that of its hidden input is: the
    stretch of its backward (the GPU check, bench/bench_gpu.py, times the same stretch)."""
    def pre(index: int):
        def hook(module, args, kwargs):
            hidden = args[0] if args else kwargs.get("hidden_states")
            if isinstance(hidden, torch.Tensor) and hidden.requires_grad:
                hidden.register_hook(lambda grad: end(index))
        return hook

    def post(index: int):
        def hook(module, args, kwargs, output):
            hidden = next((t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad), None)
            if hidden is not None:
                hidden.register_hook(lambda grad: begin(index))
        return hook

    handles = []
    try:
        for index, layer in layers.items():
            handles.append(layer.register_forward_pre_hook(pre(index), with_kwargs=True))
            handles.append(layer.register_forward_hook(post(index), with_kwargs=True))
        yield
    finally:
        for handle in handles:
            handle.remove()
