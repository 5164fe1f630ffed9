"""Modules built on meta made fake: what a probe runs (docs/census.md, "How a config becomes a
spec", step 4).

`Module.to_empty` under a FakeTensorMode would do, but it hands each meta tensor to
`empty_like`, and the mode must first convert that meta input to a fake tensor of its own
(about 0.5 ms a tensor, uncached). A tensor made from its shape and dtype alone is a factory
call the mode answers from its dispatch cache. Only a tensor that is not contiguous (a layout
`empty_like` would keep) goes the `to_empty` way.
"""

from __future__ import annotations

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

DEVICE = "cpu"  # the device fake tensors say they are on: the model's code runs its CPU paths


def _empty(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.is_contiguous():
        return torch.empty(tensor.shape, dtype=tensor.dtype, device=DEVICE)
    return torch.empty_like(tensor, device=DEVICE)


def on_meta(module: nn.Module) -> bool:
    """`module` holds a parameter or buffer of its own that is still on meta."""
    return any(t.is_meta for t in (*module.parameters(recurse=False), *module.buffers(recurse=False)))


def make_fake(module: nn.Module, mode: FakeTensorMode, recurse: bool = True) -> None:
    """Replace `module`'s parameters and buffers (its children's too with `recurse`) with
    uninitialised fake tensors of `mode`, of the same shapes and dtypes, as `to_empty` does."""
    with mode:
        module._apply(_empty, recurse=recurse)


def make_meta_fake(module: nn.Module, mode: FakeTensorMode) -> None:
    """make_fake for each module under `module` (itself included) still holding meta tensors:
    what an earlier probe of the same model left on meta (the layers it did not run)."""
    for each in module.modules():
        if on_meta(each):
            make_fake(each, mode, recurse=False)


def fake_mode_of(module: nn.Module) -> FakeTensorMode | None:
    """The mode of a module an earlier probe made fake (a second probe of the same layers)."""
    weight = next(module.parameters(), None)
    return weight.fake_mode if isinstance(weight, FakeTensor) else None
