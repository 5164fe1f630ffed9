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
frees before reporting, so the report itself does not fail for want of memory, and runs the
call on a thread whose stack is mapped before the budget is set, so a stack that must grow
once the budget is spent does not kill it (a SIGSEGV, which the parent could only call a death).

A Dask worker is a daemonic process by default, and a daemonic process may not have
children: run such workers with `distributed.worker.daemon: False`
(`DASK_DISTRIBUTED__WORKER__DAEMON=False`).
"""

from __future__ import annotations

import importlib
import multiprocessing
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

# Imported once by the fork server, so each forked child starts warm. pyarrow (imported lazily
# by the pricing) maps its libraries before a child's memory budget is set, not inside it; its
# compute functions import numpy.ma on their first call.
PRELOAD = ["speccat.flows.analysis", "pyarrow.compute", "numpy.ma"]

# Freed by a child that ran out of memory, so that it can still report why (bytes).
RESERVE_BYTES = 8 << 20
# The stack the child's call runs on, mapped whole before the budget is set (bytes): eight
# times the 8 MiB a Linux main thread is usually allowed, for the dispatch modes' deep calls.
STACK_BYTES = 64 << 20
# How often the parent samples a child's peak address space while it waits (seconds).
SAMPLE_S = 0.02
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


def vm_bytes(field: str = "VmSize", pid: int | str = "self") -> int | None:
    """A process's address space now (Linux /proc; this process's by default), or at its peak
    (`VmPeak`), or None where it cannot be read (not Linux, or a process that has exited)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def limit_memory(memory_limit: float) -> int | None:
    """Let this process map at most `memory_limit` MiB more than it has mapped now (Linux only:
    elsewhere RLIMIT_AS is not enforced the same way, and the budget is not applied); returns
    the limit set (bytes of address space), or None."""
    import resource

    start = vm_bytes()
    if start is not None:
        limit = start + int(memory_limit * 2**20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        return limit
    return None


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


def _call(conn, target: str, args: tuple, memory_limit: float | None) -> tuple:
    """The message a child sends last: ("ok", value) or why not (see `run`). Under a budget it
    first tells the parent its limit, ("limit", bytes)."""
    from speccat.census.spec import SpecError

    reserve = None
    try:
        if memory_limit is not None:
            reserve = bytearray(RESERVE_BYTES)  # taken before the limit, not out of the budget
            conn.send(("limit", limit_memory(memory_limit)))
        return ("ok", _resolve(target)(*args))
    except BaseException as err:  # everything is reported to the parent, never lost
        reserve = None  # room to report in, if memory ran out
        tb = traceback.extract_tb(err.__traceback__)
        where = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
        refusal = isinstance(err, SpecError) and err.reason != "census_failed"  # a stated refusal, not an unexpected error the census wrapped
        if memory_limit is not None and (out_of_memory(err) or (not refusal and reached_budget())):
            return ("memory", type(err).__name__, f"{type(err).__name__}: {err}{where}")
        if isinstance(err, SpecError):
            return ("spec_error", err.reason, str(err))
        return ("exception", type(err).__name__, f"{type(err).__name__}: {err}{where}")
    finally:
        del reserve


def _child(conn, target: str, args: tuple, memory_limit: float | None = None) -> None:
    """The child's body. The call runs in a thread whose whole stack is mapped when the thread
    starts, before the memory budget is set: a main thread's stack grows on demand, and growing
    it past RLIMIT_AS kills the process with SIGSEGV, which the parent could only call a death.
    Within the mapped stack, running out of the budget is always an allocation that fails."""
    message = []
    previous = threading.stack_size(STACK_BYTES)
    try:
        worker = threading.Thread(target=lambda: message.append(_call(conn, target, args, memory_limit)), name="speccat-call")
        worker.start()
    finally:
        threading.stack_size(previous)
    worker.join()
    try:
        conn.send(message[0])
    except Exception as err:  # a value that does not pickle is an error, not a silent death
        kind = "memory" if memory_limit is not None and out_of_memory(err) else "exception"
        conn.send((kind, type(err).__name__, f"the result could not be sent back: {err}"))
    conn.close()


def _death(exitcode: int | None, memory_limit: float | None, limit: int | None, peak: int | None) -> Outcome:
    """A child that died without a word. Killed by a signal once its address space had peaked
    within RESERVE_BYTES of its limit, it ran out of its budget: native code (torch's dispatch
    under fake tensors) can crash on an allocation that failed instead of raising. The peak is
    the parent's last sample of it, at most SAMPLE_S old, so a child that jumped to its limit in
    its last instant is still called a death."""
    if exitcode is not None and exitcode < 0 and limit is not None and peak is not None and peak >= limit - RESERVE_BYTES:
        name = signal.Signals(-exitcode).name
        return Outcome(error="memory", message=f"needed more than its memory budget of {memory_limit:g} MiB (killed by {name} at its limit)")
    return Outcome(error="died", message=f"the census process died (exit code {exitcode})")


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
        deadline, limit, peak = time.monotonic() + time_limit, None, None
        while True:
            if not receiver.poll(min(SAMPLE_S, max(0.0, deadline - time.monotonic()))):
                if time.monotonic() >= deadline:
                    child.kill()
                    return Outcome(error="timeout", message=f"stopped after its time limit of {time_limit:g} s")
                if memory_limit is not None:
                    peak = vm_bytes("VmPeak", child.pid) or peak
                continue
            try:
                kind, *rest = receiver.recv()
            except EOFError:
                child.join()
                return _death(child.exitcode, memory_limit, limit, peak)
            if kind != "limit":
                break
            limit = rest[0]
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
