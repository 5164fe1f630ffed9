"""Run one function call in a child process that can be stopped: the census's sandbox.

The census sets torch's default dtype and pushes dispatch modes, which are process-global, and
a census can hang; so each config's census runs in a child process of its own, which is
killed when it passes its time limit. Children come from multiprocessing's `forkserver`,
which imports the heavy modules (torch, transformers, the census) once and then forks a
warm, clean child per call: a call costs a fork, not a five-second import.

`run("module:function", args, time_limit)` returns an `Outcome`: the value, or the error the child
raised (a SpecError keeps its reason), or a `timeout`, or the child's death. It never raises
for what happens inside the child.

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

# Imported once by the fork server, so each forked child starts warm.
PRELOAD = ["speccat.flows.analysis"]

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
    error: str | None = None  # "spec_error", "exception", "timeout" or "died"
    reason: str | None = None  # the SpecError's reason, when error == "spec_error"
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


def _resolve(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _child(conn, target: str, args: tuple) -> None:
    from speccat.census.spec import SpecError

    try:
        message = ("ok", _resolve(target)(*args))
    except SpecError as err:
        message = ("spec_error", err.reason, str(err))
    except BaseException as err:  # everything else is reported to the parent, never lost
        tb = traceback.extract_tb(err.__traceback__)
        where = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
        message = ("exception", type(err).__name__, f"{type(err).__name__}: {err}{where}")
    try:
        conn.send(message)
    except Exception as err:  # a value that does not pickle is an error, not a silent death
        conn.send(("exception", type(err).__name__, f"the result could not be sent back: {err}"))
    conn.close()


def run(target: str, args: tuple, time_limit: float) -> Outcome:
    """Call the function named `target` ("module:function") with `args` in a forked child;
    kill the child after `time_limit` seconds. Naming the function keeps its heavy module
    out of the calling process: only the children import it."""
    ctx = context()
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(sender, target, args), name="speccat-census")
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
        return Outcome(error="exception", message=rest[1])
    finally:
        receiver.close()
        child.join(timeout=5)
        if child.is_alive():
            child.kill()
            child.join()
