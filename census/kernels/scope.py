"""Which kernel is running now: the scope a kernel's stand-in runs its op in, read by the probe
to tell the tensors a kernel keeps from the rest (docs/census.md, "Measured bytes").

A stand-in (census/kernels/*.py) runs its op inside `kernel_scope(NAME)`, NAME its record's
(census/structure/kernel_registry.py `Kernel.name`); census/measure/watcher.py books what autograd
saves inside it by that record's `keeps`. Attention run as the model's own eager code
(census/kernels/attention.py) runs in scopes of its own names, and census/kernels/routing.py runs
the score chain it takes for a softmax attention's in the flash kernel's scope. Outside every
scope `current_kernel()` is None: the probe reads the model's own ops (norms, routers, dropouts,
inline activations) only there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_KERNEL: ContextVar[str | None] = ContextVar("speccat_kernel", default=None)


def current_kernel() -> str | None:
    """The scope running now: a kernel's name, or a name of attention run as written; None outside every scope."""
    return _KERNEL.get()


@contextlib.contextmanager
def kernel_scope(name: str) -> Iterator[None]:
    """Run the block in the scope `name` (the kernel's record name, census/structure/kernel_registry.py)."""
    token = _KERNEL.set(name)
    try:
        yield
    finally:
        _KERNEL.reset(token)
