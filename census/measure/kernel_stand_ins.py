"""The registered kernels' stand-ins put in place of the functions a probed layer's modules call
(census/structure/kernel_registry.py), while the layers run, and the functions restored after."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

from speccat.census.structure.predicates import kernel_sites


@contextlib.contextmanager
def kernels_swapped(layers: dict[int, nn.Module]) -> Iterator[None]:
    """Point each function the layers' modules call that a registered kernel stands in for (a
    linear attention's delta rule and causal conv1d, a Mamba mixer's fused selective scan or its
    scan apart, RWKV's WKV, an RG-LRU's recurrence: a method of its class) at the kernel's
    stand-in while the layers run (predicates.kernel_sites)."""
    targets = {
        (id(holder), name): (holder, name, kernel.stand_in)
        for layer in layers.values()
        for m in layer.modules()
        for kernel, holder, name in kernel_sites(m)
    }
    saved = {key: getattr(holder, name) for key, (holder, name, _) in targets.items()}
    try:
        for holder, name, stand_in in targets.values():
            setattr(holder, name, stand_in)
        yield
    finally:
        for key, (holder, name, _) in targets.items():
            setattr(holder, name, saved[key])
