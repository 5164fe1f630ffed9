"""The backward peak: per probed layer, the most bytes alive at any moment of its backward beyond
those alive before it began (docs/census.md, "The backward peak").

Before a layer's backward begins, what it saved and everything else alive (the saves of the
layers before it, the parameters) are there already; what its backward holds on top is the
gradient it receives, the gradients it forms, less the saves it has used and freed: its working
set. Under a switch set, torch's checkpoint re-runs the recomputed ops when the layer's backward
first reads a save, so their outputs come on top too: that part is the records' own price of
what the set recomputes, and the census measures the working set with nothing recomputed.

The layer's backward is the stretch from the moment the gradient of its output is ready (a hook
on the output tensor, which counts that gradient in) to the moment the gradient of its input is
(a hook on the input tensor). Between them every op's new storages are followed (a
TorchDispatchMode, weak references), and so are the saves: a saved storage counts while a graph
node still holds it (the watcher's holders, census/measure/watcher.py), since autograd frees a
node's saves once the node has run. At the peak, what is alive of it is kept by width and dtype
(`working_set`), which the records price at any setting. The weights' own gradients are not
asked for (the probe's backward runs to the stack's input only): under Megatron-LM's
gradient-accumulation fusion they are summed into the fp32 main gradient in place, which the
model states already hold.
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
    """Follows what is alive during the backward and, per layer index, the most beyond what was
    alive before its backward began (`peaks`), and what that is at the peak (`at_peak`)."""

    def __init__(self, watcher: Watcher):
        super().__init__()
        self.watcher = watcher
        self.made: dict[int, tuple[StorageWeakRef, int, torch.dtype]] = {}  # storages the backward made -> (weak ref, bytes, dtype)
        self.saved = 0  # bytes of the saves a graph node still holds
        self.window: tuple[int, int] | None = None  # (layer index, bytes alive before its backward began)
        self.peaks: dict[int, int] = {}
        self.opened: set[int] = set()  # the made storages alive when the open window began
        self.freed: list[tuple[int, torch.dtype]] = []  # (bytes, dtype) of the saves, and of those storages, freed since it began
        # per layer index, at its peak: (bytes, dtype) of the storages made since its backward
        # began and still alive, and of what was alive then and freed since (working_set turns them into widths)
        self.at_peak: dict[int, tuple[list[tuple[int, torch.dtype]], list[tuple[int, torch.dtype]]]] = {}

    def __enter__(self):
        """Count the saves still held, each lowered from the total when the last node holding it frees it."""
        for key, savers in self.watcher.seen.items():
            holders = [holder for holder in (held() for _, _, _, held, _ in savers) if holder is not None]
            if holders:
                nbytes, left = savers[0][2], [len(holders)]
                dtype = self.watcher.cuda_dtypes.get(key, holders[0].tensor.dtype)  # a dropout's mask, a LayerNorm's statistics: CUDA's
                self.saved += nbytes
                for holder in holders:
                    weakref.finalize(holder, self._released, left, nbytes, dtype)
        return super().__enter__()

    def _released(self, left: list[int], nbytes: int, dtype: torch.dtype) -> None:
        left[0] -= 1
        if left[0] == 0:
            self.saved -= nbytes
            if self.window is not None:
                self.freed.append((nbytes, dtype))

    def alive(self) -> int:
        """The bytes alive now of what the forward saved and the backward made."""
        for key in [k for k, (ref, _, _) in self.made.items() if ref.expired()]:
            self._dropped(key)
        return self.saved + sum(nbytes for _, nbytes, _ in self.made.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.index_put.default and storage_key(args[0]) in self.made:
            # the index's backward fills zeros it made with the gradient: in place on plain
            # tensors, out of place on tensors it takes for a subclass (fake tensors, any tensor
            # while a dispatch mode runs); counted as the plain run fills them, the copy in the zeros' place
            zeros = storage_key(args[0])
            self.made[storage_key(out)] = (StorageWeakRef(out.untyped_storage()), *self.made.pop(zeros)[1:])
            if zeros in self.opened:
                self.opened.discard(zeros)
                self.opened.add(storage_key(out))
        given = {storage_key(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):  # a view or an in-place op's output is its input's storage: nothing new
                key = storage_key(tensor)
                if key in self.made and self.made[key][0].expired():  # a freed storage's key, taken by a new one
                    self._dropped(key)
                if key not in given and key not in self.made:
                    self.made[key] = (StorageWeakRef(tensor.untyped_storage()), tensor.untyped_storage().nbytes(), tensor.dtype)
        if self.window is not None:
            index, start = self.window
            beyond = self.alive() - start
            if beyond > self.peaks.get(index, 0):
                self.peaks[index] = beyond
                new = [(nbytes, dtype) for key, (_, nbytes, dtype) in self.made.items() if key not in self.opened]
                self.at_peak[index] = (new, list(self.freed))
        return out

    def _dropped(self, key: int) -> None:
        """Forget a made storage that was freed; one alive when the open window began counts as freed in it."""
        _, nbytes, dtype = self.made.pop(key)
        if key in self.opened:
            self.opened.discard(key)
            self.freed.append((nbytes, dtype))

    def begin(self, index: int, grad: torch.Tensor) -> None:
        """Open layer `index`'s window, the gradient of its output (`grad`) counted in it."""
        received = storage_key(grad)
        self.window = (index, self.alive() - (self.made[received][1] if received in self.made else 0))
        self.peaks.setdefault(index, 0)
        self.opened = set(self.made) - {received}
        self.freed = []

    def end(self, index: int) -> None:
        if self.window is not None and self.window[0] == index:
            self.window = None

    def windows(self, layers: dict[int, nn.Module]) -> contextlib.AbstractContextManager:
        """backward_windows over `layers`, opening and closing this mode's windows."""
        return backward_windows(layers, self.begin, self.end)


@contextlib.contextmanager
def backward_windows(layers: dict[int, nn.Module], begin: Callable[[int, torch.Tensor], None], end: Callable[[int], None]) -> Iterator[None]:
    """Hooks, while the forward runs, that call `begin(index, grad)` when the gradient of layer
    `index`'s hidden output is ready (`grad`) and `end(index)` when that of its hidden input is:
    the stretch of its backward (the GPU check, bench/bench_gpu.py, times the same stretch)."""
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
                hidden.register_hook(lambda grad: begin(index, grad))
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


def working_set(at_peak: tuple[list[tuple[int, torch.dtype]], list[tuple[int, torch.dtype]]] | None, tokens: int, compute: torch.dtype) -> dict:
    """A layer's working set at its backward peak as the spec states it (`measured.working_set`):
    the tensors made since its backward began and still alive, less the saves freed since, by
    width (elements per token of the sequence's `tokens`) and dtype (`compute` for the layer's
    compute dtype, else torch's name of it), each a net count; and the bytes of those whose size
    is no whole number of elements per token (a vector of a norm's width), as one constant. The
    records price the widths at any setting (catalogue/records/records.yaml, `working`)."""
    made, freed = at_peak or ([], [])
    counts: dict[tuple[int, str], int] = {}
    constant = 0
    for sign, tensors in ((1, made), (-1, freed)):
        for nbytes, dtype in (t for t in tensors if t[0]):  # a buffer CUDA leaves empty holds nothing
            size = torch.empty((), dtype=dtype).element_size()
            if nbytes % (size * tokens):
                constant += sign * nbytes
                continue
            name = "compute" if dtype == compute else str(dtype).removeprefix("torch.")
            key = (nbytes // (size * tokens), name)
            counts[key] = counts.get(key, 0) + sign
    widths = [[width, dtype, count] for (width, dtype), count in sorted(counts.items()) if count]
    return {"widths": widths, "constant_bytes": constant}
