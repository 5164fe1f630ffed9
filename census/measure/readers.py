"""Layers that read what an earlier layer stored (docs/census.md, "Layers reading another
layer's keys and values").

A decoder hands each layer its hidden states and the tensors it made itself (masks, rotary
tables). Some layers also read tensors an earlier layer made and left outside the hidden stream:
gemma3n's last `num_kv_shared_layers` layers take the keys and values that the last earlier layer
of their attention type stored in a dict the decoder passes along (`shared_kv_states`). A probe
that runs such a layer without the layer it reads from fails in the model's own code.

Which layer reads from which is told by running the whole stack once, watched: every storage an
op makes inside a layer is that layer's; an op inside layer j that reads a storage layer i ≠ j
made, which reached j by none of its call's tensor arguments, makes i a *source* of j. Nothing is
read from names: any side channel between layers (a dict, a module attribute, a cache) shows up
the same way.

A layer called with a stack of hidden states beside its own (…, n, width), states the decoder
stores down the depth and hands every layer (inkling2's block states), reads from every layer
before it: it runs with all of them (`with_earlier`), told by the shape of what it is called with.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def reads_depth(args: Any, hidden: Any) -> bool:
    """A layer called with `args` (its call's arguments) and hidden states `hidden` is also given a
    stack of hidden states: a tensor with their dims, one more before the width, and the width."""
    if not isinstance(hidden, torch.Tensor) or hidden.dim() == 0:
        return False
    return any(
        isinstance(t, torch.Tensor) and t is not hidden and t.dim() == hidden.dim() + 1
        and t.shape[:-2] == hidden.shape[:-1] and t.shape[-1] == hidden.shape[-1]
        for t in tree_leaves(args)
    )


def _keys(tree: Any) -> set[int]:
    return {t.untyped_storage()._cdata for t in tree_leaves(tree) if isinstance(t, torch.Tensor)}


class StoredReads(TorchDispatchMode):
    """While the decoder runs every layer: which earlier layers each layer reads from."""

    def __init__(self, layers: Iterable[nn.Module]):
        super().__init__()
        self.layers = list(layers)
        self.current: int | None = None
        self.passed: set[int] = set()  # storages of the running layer's tensor arguments
        self.maker: dict[int, int] = {}  # storage -> the layer that made it
        self.alive: list[Any] = []  # every storage seen, held so no identity is reused
        self.sources: dict[int, set[int]] = {}  # layer -> the layers whose stored tensors it read
        self.depth = False  # some layer was called with a stack of hidden states (`reads_depth`)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.current is not None:
            for key in _keys((args, kwargs)):
                maker = self.maker.get(key)
                if maker is not None and maker != self.current and key not in self.passed:
                    self.sources.setdefault(self.current, set()).add(maker)
            for tensor in (t for t in tree_leaves(out) if isinstance(t, torch.Tensor)):
                self.alive.append(tensor.untyped_storage())
                self.maker.setdefault(tensor.untyped_storage()._cdata, self.current)
        return out

    @contextlib.contextmanager
    def hooks(self) -> Iterator[None]:
        def enter(index: int):
            def hook(module, args, kwargs):
                self.current, self.passed = index, _keys((args, kwargs))
                self.depth = self.depth or reads_depth((args, kwargs), args[0] if args else kwargs.get("hidden_states"))

            return hook

        def leave(module, args, kwargs, output):
            self.current, self.passed = None, set()

        handles = []
        try:
            for index, layer in enumerate(self.layers):
                handles.append(layer.register_forward_pre_hook(enter(index), with_kwargs=True))
                handles.append(layer.register_forward_hook(leave, with_kwargs=True))
            with self:
                yield
        finally:
            for handle in handles:
                handle.remove()


def with_earlier(sources: dict[int, set[int]], count: int) -> dict[int, set[int]]:
    """`sources` with every layer of a stack of `count` reading from every layer before it: layers
    called with a stack of hidden states stored down the depth (inkling2's block states: the
    decoder appends a block's input to them every few layers, and each layer attends over them),
    so what a layer keeps depends on its place, and a probe runs it at that place."""
    return {index: set(sources.get(index, ())) | set(range(index)) for index in range(count)}


def with_sources(indices: Iterable[int], sources: dict[int, set[int]]) -> list[int]:
    """`indices` and every layer they read from, directly or through another, in stack order."""
    wanted, todo = set(indices), list(indices)
    while todo:
        for source in sources.get(todo.pop(), ()):
            if source not in wanted:
                wanted.add(source)
                todo.append(source)
    return sorted(wanted)
