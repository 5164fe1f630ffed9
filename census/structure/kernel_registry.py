"""The kernels the census stands in for, one record each: the function a model calls that the
kernel replaces, the custom op that computes it, the stand-in swapped in for the model's
function, its FLOP formula and what the probe books of each call (docs/census.md, "How to add a
kernel").

Each kernel module of census/kernels/ builds its `Kernel` and `register`s it when imported, and
census/kernels/__init__.py imports every one of them. The rooms that need the kernels iterate
over the records instead of naming each kernel:

- census/structure/predicates.py finds where a layer's forward calls a kernel by `calls` (and
  tells a mixer by the `kind` of the kernels it calls);
- census/measure/kernel_stand_ins.py puts each `stand_in` in place of what `calls` matched
  while the layers run; census/measure/watcher.py books each call of `op` by `book`, and
  what autograd saves while the stand-in runs by `keeps`;
- census/measure/flops.py hands each `flops` formula to FlopCounterMode.

The registry lives in the structure room, below the kernels that fill it: what a layer is (a
linear attention, a Mamba mixer) is told by the kernels its forward calls, and the structure
room reads that here without importing the kernels room.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from speccat.catalogue.vocabulary import OPS

# The torch.library namespace of the census's custom ops: each is `speccat::NAME`.
NAMESPACE = "speccat"


def storage_key(tensor: Any) -> int:
    """The identity of a tensor's storage, by which the probe books what is saved and a booking
    tells tensors that share memory."""
    return tensor.untyped_storage()._cdata


def shapes(**named: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """A kernel call's named shapes (KernelCall.shapes), each as a tuple of ints."""
    return tuple((name, tuple(int(n) for n in shape)) for name, shape in named.items())


@dataclass
class KernelCall:
    """One kernel call as the probe records it (LayerProbe.kernels): its kind, the layer's child it
    ran in, and the shapes of what it was given, each by its own name (`call["A"]`), by kind:

    - "attention": q (b, h, s, d), k and v (b, kv_heads, t, d|dv);
    - "delta_rule" (either gate): q, k (b, s, kv_heads, dk), v (b, s, heads, dv);
    - "scan": Mamba's fused mixer xz (b, 2·inner, s), A (inner, state), dt_weight (dt_proj's
      weight: inner, rank); the scan apart from its conv u (b, inner, s) and A;
    - "ssd" (Mamba2): zxbcdt (b, s, width), heads (heads, head dim), groups (groups, state);
    - "conv" (causal conv1d): x (b, channels, s), weight (channels, width);
    - "wkv" (RWKV): key (b, s, channels), time_decay (channels,), value (b, s, channels);
    - "rglru" (the RG-LRU's recurrence): x (b, s, width), a (its gate);
    - "linear_eager" (a linear attention run in torch, census/kernels/routing.py): q, k, v of one
      block (b, heads, n, d), or of every chunk (b, heads, chunks, n, d) as xLSTM's mLSTM writes them.
    """

    kind: str
    child: str | None  # the layer's top-level child it ran in
    shapes: tuple[tuple[str, tuple[int, ...]], ...]  # (name, shape) of each input, in the order above (`shapes(...)`)
    window: int = 0
    causal: bool = True
    heads_major: bool = False  # q's memory is (b, h, s, d): the kernel's output is too
    v_is_view: bool = False  # v is a view into a larger storage (a fused projection's output)
    qk_share_v: bool = False  # q and k are views into v's storage too (nothing made them anew)
    kv_same: bool = False  # k and v are one tensor (shared-KV attention: DeepSeek-V4), which the kernel keeps once
    index_topk: int = 0  # keys each query attends to under sparse indices (DeepSeek DSA)
    dropout: float = 0.0  # the attention-probability dropout the kernel was called with
    bias_bytes: int = 0  # an additive score bias the kernel was given (and keeps): its element bytes
    bias_given: bool = False  # an additive score bias the eager code was given, which adds it and keeps none of it (census/kernels/attention.py)
    in_bytes: int = 0  # a causal conv1d's input (which it keeps): its element bytes
    in_is_view: bool = False  # a causal conv1d's input is a view into a larger storage (jamba's: in_proj's whole output), which it keeps whole
    gate_channel_bytes: int = 0  # a delta rule gated per key channel (Kimi delta attention): its gate's element bytes
    apart: bool = False  # a selective scan called on its own, its conv and projections outside it
    bc_is_view: bool = False  # a scan apart was handed B (and C) as views into a larger storage (zamba's x projection's output), not copies of its own
    gated: bool = False  # a linear attention run in torch whose decay is computed from the tokens (census/kernels/routing.py)
    kv_borrowed: bool = False  # k is a storage another probed layer made (census/measure/readers.py: keys and values an earlier layer stored)
    index_borrowed: bool = False  # the sparse indices are a storage another probed layer made (hy_v4's shared-indexer layers reuse an earlier layer's top-k)
    eager: bool = False  # a softmax attention run as the model's eager code (census/kernels/attention.py), not the flash kernel
    qkv_row: int = 0  # a linear attention run in torch: elements per token of the distinct storages q, k and v are views of (each its own, or one fused projection's output whole)
    score_columns: int = 0  # such an attention's softmax: the columns it ran over, the keys and any logits beside them (census/measure/eager_scores.py)

    def __getitem__(self, name: str) -> tuple[int, ...]:
        """The shape of the input `name` (KeyError for one this call was not given)."""
        for given, shape in self.shapes:
            if given == name:
                return shape
        raise KeyError(f"a {self.kind} call has no input {name!r}: {[given for given, _ in self.shapes]}")

    def __contains__(self, name: str) -> bool:
        return any(given == name for given, _ in self.shapes)


class CallSeen(NamedTuple):
    """One call of a kernel's op as the probe saw it dispatched: what a `Kernel.book` reads."""

    args: tuple
    kwargs: dict
    child: str | None  # the layer's child it ran in
    made_elsewhere: Callable[[Any], bool]  # a tensor's storage was made by another probed layer (census/measure/readers.py)


@dataclass(frozen=True)
class Keeps:
    """What the tensors autograd saves while a kernel's stand-in runs are booked to (ops of the
    records' vector): those its op made (its outputs), and the others (its inputs, the copies
    the stand-in makes of them)."""

    outputs: str
    inputs: str


@dataclass(frozen=True)
class Kernel:
    """One kernel the census stands in for.

    `op` is the forward custom op (`speccat::NAME`, defined with torch.library.custom_op, with
    its fake implementation registered by `register_fake` and its autograd by
    `register_autograd`: what it saves is what the production kernel keeps). `name`, the op's,
    is also the kernel's scope while its stand-in runs (census/kernels/scope.py).
    """

    op: Any  # torch's OpOverload of the forward op: torch.ops.speccat.NAME.default
    kind: str  # what the probe records its calls as (KernelCall.kind): the mixer it makes a module
    book: Callable[[CallSeen], KernelCall]  # what the probe records of one call
    # the identity of the model's function it stands in for: a kernel hook's name (transformers'
    # `kernel_layer_name`) or a global's own name, matched by census/structure/predicates.py; None
    # for a kernel reached otherwise (flash attention, through transformers' attention interface)
    calls: re.Pattern | None = None
    method: bool = False  # what `calls` matches is a method of the module's class (the RG-LRU's `_rnn_scan`), not a global
    stand_in: Callable | None = None  # put in place of each function `calls` matched while a layer runs
    keeps: Keeps | None = None  # None: what is saved while it runs is booked by the region it runs in
    per_child: bool = False  # a projection after it in the same child is an output projection
    value_arg: int | None = None  # the argument holding the values v, whose storage the probe notes (LayerProbe.value_storages)
    fuses_conv: bool = False  # it runs the mixer's causal convolution inside (Mamba's fused mixers)
    flops: Callable[..., int] | None = None  # FlopCounterMode's formula over the arguments' shapes; None: counted 0

    @property
    def name(self) -> str:
        return self.op.name()


_KERNELS: dict[str, Kernel] = {}  # name -> record, in registration order
_BY_OP: dict[Any, Kernel] = {}


def register(kernel: Kernel) -> Kernel:
    """Add a kernel's record (a kernel module calls this when imported); returns it. A second
    record for the same op, or a booking to no op of the records' vector, is refused."""
    if kernel.name in _KERNELS:
        raise ValueError(f"kernel {kernel.name} is registered already")
    if kernel.keeps is not None and not {kernel.keeps.outputs, kernel.keeps.inputs} <= set(OPS):
        raise ValueError(f"kernel {kernel.name} books what it keeps to {kernel.keeps}, not ops of the records' vector {OPS}")
    if (kernel.calls is None) != (kernel.stand_in is None):
        raise ValueError(f"kernel {kernel.name}: a function it stands in for and its stand-in come together")
    _KERNELS[kernel.name] = kernel
    _BY_OP[kernel.op] = kernel
    return kernel


def unregister(kernel: Kernel) -> None:
    """Remove a kernel's record."""
    del _KERNELS[kernel.name]
    del _BY_OP[kernel.op]


@contextlib.contextmanager
def registered(kernel: Kernel) -> Iterator[Kernel]:
    """A kernel registered while the block runs, removed after it (a test's kernel)."""
    register(kernel)
    try:
        yield kernel
    finally:
        unregister(kernel)


def kernels() -> tuple[Kernel, ...]:
    """Every registered kernel, in registration order. None registered means census/kernels/ was
    never imported: refused, rather than answering that no layer calls a kernel."""
    if not _KERNELS:
        raise RuntimeError("no kernel is registered: import speccat.census.kernels (census/kernels/__init__.py registers every kernel)")
    return tuple(_KERNELS.values())


def kernel_of(op: Any) -> Kernel | None:
    """The kernel whose forward op `op` is (an OpOverload the probe saw dispatched), else None."""
    return _BY_OP.get(op)


def kernel_named(name: str | None) -> Kernel | None:
    """The kernel of that name (the scope its stand-in runs in), else None."""
    return _KERNELS.get(name) if name is not None else None
