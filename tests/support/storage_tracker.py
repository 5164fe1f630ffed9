"""What a real CPU forward and backward keeps, storage by storage: the tests that check a price
against real tensors (tests/pricing/test_loss_kernels.py, tests/census/test_whole_model.py) watch
a run with StorageTracker."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class StorageTracker(TorchDispatchMode):
    """Gives each new storage an op outputs a serial (its bytes and first shape remembered) and,
    after every op, puts the serials still alive on `timeline`. Storages in `existing` are not
    watched, nor is an output's storage that is one of the op's inputs' (a view, an in-place op):
    the op made no memory."""

    def __init__(self, existing):
        super().__init__()
        self.existing = {StorageWeakRef(t.untyped_storage()).cdata for t in existing}
        self.refs = {}  # storage address -> (weak ref, serial); a freed address may come back
        self.nbytes, self.shape, self.timeline = [], [], []

    def alive(self) -> set[int]:
        for address in [a for a, (ref, _) in self.refs.items() if ref.expired()]:
            del self.refs[address]
        return {serial for _, serial in self.refs.values()}

    def serial(self, tensor: torch.Tensor) -> int:
        return self.refs[StorageWeakRef(tensor.untyped_storage()).cdata][1]

    def bytes(self, serials) -> int:
        return sum(self.nbytes[i] for i in serials)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.alive()  # forget the freed storages before a new one takes an address back
        given = {StorageWeakRef(t.untyped_storage()).cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for tensor in (t for t in tree_leaves(out) if isinstance(t, torch.Tensor)):
            ref = StorageWeakRef(tensor.untyped_storage())
            if ref.cdata not in self.refs and ref.cdata not in self.existing and ref.cdata not in given:
                self.refs[ref.cdata] = (ref, len(self.nbytes))
                self.nbytes.append(tensor.untyped_storage().nbytes())
                self.shape.append(tuple(tensor.shape))
        self.timeline.append(self.alive())
        return out


class PlainIndexPut(StorageTracker):
    """A StorageTracker whose count (`plain_bytes`) leaves out the zeros an out-of-place
    index_put filled while its copy is alive, as the in-place fill of a plain run would hold them
    once: while a dispatch mode runs (this tracker), torch takes every tensor for a subclass
    (ATen's TensorSubclassLikeUtils.h), and the index's backward then fills out of place."""

    def __init__(self, existing):
        super().__init__(existing)
        self.filled = []  # (the zeros' serial, the copy's serial)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if func is torch.ops.aten.index_put.default:
            self.filled.append((self.serial(args[0]), self.serial(out)))
        return out

    def plain_bytes(self, alive) -> int:
        return self.bytes(alive) - sum(self.nbytes[zeros] for zeros, copy in self.filled if zeros in alive and copy in alive)


@contextlib.contextmanager
def saved_tensors() -> Iterator[dict[int, tuple[torch.Tensor, list]]]:
    """What autograd saves while the block runs: storage address -> (a tensor of it, a weak
    reference to the holder of each save). A holder lives as long as the graph node that saved
    it, so a save whose holders are all dead is one no output reaches, freed after the forward.
    Both hold detached aliases: a node that saves its own output (ReLU's) would otherwise be held
    alive through that output's grad_fn, a cycle, as a run without hooks never holds it."""

    class Holder:
        def __init__(self, tensor):
            self.tensor = tensor

    held: dict[int, tuple[torch.Tensor, list]] = {}

    def pack(tensor):
        alias = tensor.detach()
        holder = Holder(alias)
        held.setdefault(tensor.untyped_storage()._cdata, (alias, []))[1].append(weakref.ref(holder))
        return holder

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda holder: holder.tensor):
        yield held
