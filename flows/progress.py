"""Progress lines for a long refresh: off unless the CLI turns it on (`speccat refresh`).

The flow calls `step(stage, done, total, by)` as its futures complete and `note(text)` at the
end of each stage. With a stream set, a line goes out when a stage starts, every `every`
items, and when it ends, so a terminal or a log file shows where a night is.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

_lock = threading.Lock()
_stream: TextIO | None = None
_every = 10
_started = time.monotonic()


def enable(stream: TextIO = sys.stderr, every: int = 10) -> None:
    global _stream, _every, _started
    _stream, _every, _started = stream, max(1, every), time.monotonic()


def disable() -> None:
    global _stream
    _stream = None


def _emit(text: str) -> None:
    with _lock:
        if _stream is not None:
            _stream.write(f"[{time.monotonic() - _started:6.1f}s] {text}\n")
            _stream.flush()


def step(stage: str, done: int, total: int, by: int = 1) -> None:
    """`done` of `total` items, `by` more than at the last step: a line at the first step, at
    the last, and whenever a multiple of `every` was passed."""
    if done == total or done == by or done // _every > (done - by) // _every:
        _emit(f"{stage}: {done}/{total}")


def note(text: str) -> None:
    _emit(text)
