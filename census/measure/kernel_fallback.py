"""A mixer's causal convolution run in torch where training runs it in a kernel: noted while the
probe watches, refused after the forward as `kernel_fallback`.

A depthwise 1-D convolution run in torch inside a mixer whose causal conv runs in a kernel
(predicates.expects_conv_kernel) means the census's stand-in did not see the kernel function
(renamed, or moved where no hook lists it), so what ran is the torch fallback, which keeps
other tensors.
"""

from __future__ import annotations

import torch

from speccat.census.spec import SpecError
from speccat.census.structure.predicates import expects_conv_kernel

CONVOLUTION = torch.ops.aten.convolution.default


def note_convolution(watcher, probe, func, args, kwargs, out) -> None:
    """A depthwise 1-D convolution inside a mixer that expects the conv kernel: the mixer noted
    (watcher.fallbacks)."""
    x, weight, groups = args[0], args[1], args[8]
    if weight.dim() != 3 or groups <= 1 or groups != x.shape[1]:
        return
    mixer = next((name for name, module in watcher.path if expects_conv_kernel(module)), None)
    if mixer is not None:
        watcher.fallbacks.append(f"{mixer} ({type(dict(watcher.path)[mixer]).__name__})")


def refuse_fallbacks(fallbacks: list[str]) -> None:
    """Refuse a probe in which a mixer's causal convolution ran in torch (`fallbacks`, as noted)."""
    if fallbacks:
        raise SpecError(
            "kernel_fallback",
            f"{fallbacks[0]}: a depthwise convolution ran in torch where the causal-conv1d kernel runs in training; "
            "the census found no kernel function to stand in for (renamed or moved without a kernel hook), so it would measure the torch fallback",
        )
