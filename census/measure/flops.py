"""The census's forward FLOPs of one layer: torch's FlopCounterMode around the probe's forward
(docs/census.md, "Measured FLOPs"), with the FLOP counts of the ops FlopCounterMode does not
know handed to it.

FlopCounterMode counts matmuls (2·m·n·k), convolutions and its own attention ops, and nothing
for element-wise ops. The census's kernels are custom ops and the experts run
`aten._grouped_mm`: FlopCounterMode counts each 0 unless it is given a count for it. The
kernels' counts are their records' `flops` (census/structure/kernel_registry.py; each kernel
module of census/kernels/ states its own): what FlopCounterMode counts for the same work written
in the ops it knows. `aten._grouped_mm`'s is here: 2·m·n·k over the rows the groups hold (the
token slots the router chose).

The recurrences themselves (the selective scan, SSD's scan, the gated delta rule, RWKV's WKV,
the RG-LRU's) count 0: element-wise multiply-adds over the state, which FlopCounterMode counts 0
when written in torch. A kind that runs one is measured short of the records' price by that
recurrence (costs.yaml prices the delta rule as attention over its 64-token chunk).

The counts are handed to each counter (FlopCounterMode's `custom_mapping`), not registered in
torch's global table: a kernel registered later (a test's) is counted too, and nothing is left
behind when it is removed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from math import prod

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import speccat.census.kernels  # noqa: F401  (registers every kernel, with its FLOP formula)
from speccat.census.structure.kernel_registry import kernels


def _grouped_mm(a, b, *args, out_shape=None, **kwargs) -> int:
    if len(a) == 2 and len(b) == 2:  # groups along the contraction: each row meets each column once over all of k
        return 2 * a[0] * a[1] * b[1]
    return 2 * prod(out_shape) * a[-1]


def formulas() -> dict[object, Callable[..., int]]:
    """The FLOP formula of each op FlopCounterMode does not count itself, by op: every registered
    kernel's that states one, and `aten._grouped_mm`'s."""
    found: dict[object, Callable[..., int]] = {torch.ops.aten._grouped_mm: _grouped_mm}
    found.update((kernel.op.overloadpacket, kernel.flops) for kernel in kernels() if kernel.flops is not None)
    return found


def flop_counter() -> FlopCounterMode:
    """A FlopCounterMode that counts the census's kernels and `aten._grouped_mm` too (no display)."""
    return FlopCounterMode(display=False, custom_mapping=formulas())


class LayerFlops:
    """FlopCounterMode over a forward, read back per layer: `of(layer)` is the FLOPs counted
    while `layer` (a module of the forward's outermost module `top`) ran."""

    def __init__(self, top: nn.Module):
        self.top = top
        self.counter = flop_counter()

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        with self.counter:
            yield

    def of(self, layer: nn.Module) -> int:
        # FlopCounterMode keys its counts by module path below the outermost module that ran,
        # which it names by its class
        path = next(name for name, module in self.top.named_modules() if module is layer)
        counts = self.counter.get_flop_counts().get(f"{type(self.top).__name__}.{path}", {})
        return int(sum(counts.values()))
