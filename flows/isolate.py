"""Run one function call in a child process that can be stopped: the census's sandbox.

The census sets torch's default dtype and pushes dispatch modes, which are process-global, and
a census can hang; so each config's census runs in a child process of its own, which is
killed when it passes its time limit. Children come from multiprocessing's `forkserver`,
which imports the heavy modules (torch, transformers, the census) once and then forks a
warm, clean child per call: a call costs a fork, not a five-second import.

`run("module:function", args, time_limit, memory_limit)` returns an `Outcome`: the value, or
the error the child raised (a SpecError keeps its reason), or a `timeout`, or `memory` when the
child ran out of its memory budget, or the child's death. It never raises for what happens
inside the child.

The memory budget is address space: the child sets its RLIMIT_AS to the size it was forked
with plus `memory_limit` MiB (Linux; the inherited libraries are not the census's to pay for),
so an allocation past it fails inside the child (MemoryError, or torch's and pyarrow's own
out-of-memory errors) instead of exhausting the machine. The child keeps a small reserve it
frees before reporting, so the report itself does not fail for want of memory.

A Dask worker is a daemonic process by default, and a daemonic process may not have
children: run such workers with `distributed.worker.daemon: False`
(`DASK_DISTRIBUTED__WORKER__DAEMON=False`).
"""

from __future__ import annotations

import importlib
import multiprocessing
import threading
import traceback
from dataclasses import dataclass
from typing import Any

# Imported once by the fork server, so each forked child starts warm. pyarrow (imported lazily
# by the pricing) maps its libraries before a child's memory budget is set, not inside it.
PRELOAD = ["speccat.flows.analysis", "pyarrow.compute"]

# Freed by a child that ran out of memory, so that it can still report why (bytes).
RESERVE_BYTES = 8 << 20
# Errors other than MemoryError that say an allocation failed (torch's CPU allocator, a shared
# library that could not be mapped, the C++ runtime).
OUT_OF_MEMORY_TEXT = ("can't allocate memory", "cannot allocate memory", "failed to map segment", "bad_alloc")

_lock = threading.Lock()
_context = None


def context():
    """The forkserver context (created once per process, with the preload set)."""
    global _context
    with _lock:
        if _context is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(PRELOAD)
            _context = ctx
        return _context


def start(wait: bool = True) -> None:
    """Start the fork server (it imports PRELOAD); with `wait`, return once it forks warm
    children, so the one-time import is not charged to the first census."""
    from multiprocessing import forkserver

    context()
    forkserver.ensure_running()
    if wait:
        run("os:getpid", (), time_limit=300)


@dataclass(frozen=True)
class Outcome:
    """What a child returned or why it did not: `error` is None on success."""

    value: Any = None
    error: str | None = None  # "spec_error", "exception", "timeout", "memory" or "died"
    reason: str | None = None  # the SpecError's reason, when error == "spec_error"
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


def _resolve(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def vm_bytes(field: str = "VmSize") -> int | None:
    """This process's address space now (Linux /proc), or at its peak (`VmPeak`), or None where
    it cannot be read."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def limit_memory(memory_limit: float) -> None:
    """Let this process map at most `memory_limit` MiB more than it has mapped now (Linux only:
    elsewhere RLIMIT_AS is not enforced the same way, and the budget is not applied)."""
    import resource

    start = vm_bytes()
    if start is not None:
        limit = start + int(memory_limit * 2**20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def reached_budget() -> bool:
    """Whether this process's address space peaked within RESERVE_BYTES of its RLIMIT_AS. An
    allocation that fails that close to the limit may not say so: CPython 3.11 reports a call
    frame it could not allocate as a call missing its arguments (a TypeError), seen here as
    `hook() missing 2 required positional arguments` in a census run under a small budget."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    peak = vm_bytes("VmPeak")
    return limit != resource.RLIM_INFINITY and peak is not None and peak >= limit - RESERVE_BYTES


def out_of_memory(err: BaseException) -> bool:
    """Whether `err`, or an error it was raised from or while handling (the census wraps what
    it does not expect as a SpecError), is an allocation that failed."""
    seen = 0
    while err is not None and seen < 16:
        text = str(err).lower()
        if isinstance(err, MemoryError) or any(marker in text for marker in OUT_OF_MEMORY_TEXT):
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False


def _child(conn, target: str, args: tuple, memory_limit: float | None = None) -> None:
    from speccat.census.spec import SpecError

    reserve = None
    try:
        if memory_limit is not None:
            reserve = bytearray(RESERVE_BYTES)  # taken before the limit, not out of the budget
            limit_memory(memory_limit)
        message = ("ok", _resolve(target)(*args))
    except BaseException as err:  # everything is reported to the parent, never lost
        reserve = None  # room to report in, if memory ran out
        tb = traceback.extract_tb(err.__traceback__)
        where = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
        refusal = isinstance(err, SpecError) and err.reason != "census_failed"  # a stated refusal, not an unexpected error the census wrapped
        if memory_limit is not None and (out_of_memory(err) or (not refusal and reached_budget())):
            message = ("memory", type(err).__name__, f"{type(err).__name__}: {err}{where}")
        elif isinstance(err, SpecError):
            message = ("spec_error", err.reason, str(err))
        else:
            message = ("exception", type(err).__name__, f"{type(err).__name__}: {err}{where}")
    del reserve
    try:
        conn.send(message)
    except Exception as err:  # a value that does not pickle is an error, not a silent death
        kind = "memory" if memory_limit is not None and out_of_memory(err) else "exception"
        conn.send((kind, type(err).__name__, f"the result could not be sent back: {err}"))
    conn.close()


def run(target: str, args: tuple, time_limit: float, memory_limit: float | None = None) -> Outcome:
    """Call the function named `target` ("module:function") with `args` in a forked child;
    kill the child after `time_limit` seconds; let it map at most `memory_limit` MiB more than
    it starts with (None: no budget). Naming the function keeps its heavy module out of the
    calling process: only the children import it."""
    ctx = context()
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(sender, target, args, memory_limit), name="speccat-census")
    child.start()
    sender.close()  # the child holds the only write end: EOF on our side when it dies
    try:
        if not receiver.poll(time_limit):
            child.kill()
            return Outcome(error="timeout", message=f"stopped after its time limit of {time_limit:g} s")
        try:
            kind, *rest = receiver.recv()
        except EOFError:
            child.join()
            return Outcome(error="died", message=f"the census process died (exit code {child.exitcode})")
        if kind == "ok":
            return Outcome(value=rest[0])
        if kind == "spec_error":
            return Outcome(error="spec_error", reason=rest[0], message=rest[1])
        if kind == "memory":
            return Outcome(error="memory", message=f"needed more than its memory budget of {memory_limit:g} MiB ({rest[1]})")
        return Outcome(error="exception", message=rest[1])
    finally:
        receiver.close()
        child.join(timeout=5)
        if child.is_alive():
            child.kill()
            child.join()
