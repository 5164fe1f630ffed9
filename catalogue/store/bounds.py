"""The store's bounds (catalogue/store/limits.yaml): how long a publish waits for a lock
(catalogue/store/file.py), and the memory a publish's DuckDB connection may hold, past which it
spills to disk.

Without a memory bound DuckDB may take 80% of the machine's memory, and a first night's merge
of millions of price rows (into a lake above all, whose merge reads back what it wrote) took
all of it, on top of what the flow itself holds."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import duckdb

from speccat import sql
from speccat.catalogue.datafile import read_yaml

LIMITS: dict[str, float] = read_yaml(Path(__file__).with_name("limits.yaml"))


def bound(con: duckdb.DuckDBPyConnection, spill: Path, memory_mib: float = LIMITS["publish_memory_mib"]) -> None:
    """Limit `con`'s memory to `memory_mib` (the publish's bound unless told), spilling into `spill`."""
    con.execute(sql.render("steps/bound_memory", memory=f"{int(memory_mib)}MiB", spill=str(spill)))


@contextlib.contextmanager
def spill_directory(near: Path | None = None, prefix: str = "speccat-spill-") -> Iterator[Path]:
    """A directory to spill into, removed after: in `near` (the catalogue's own disk), or in the
    system's temporary directory (a lake, whose data may not be on a local disk).

    A process that is killed (SIGKILL, the machine's OOM killer) cannot remove its directory, and
    a first night's can hold gigabytes: so the name holds the process id (`prefix`PID-...), and
    each new one removes, in the same place, those of its prefix whose process is gone. (Processes
    that spill into one directory must see one process table: one machine, or one container.)"""
    root = Path(tempfile.gettempdir()) if near is None else near
    root.mkdir(parents=True, exist_ok=True)
    sweep_dead(root, prefix)
    with tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-", suffix=".tmp", dir=root) as path:
        yield Path(path)


def sweep_dead(root: Path, prefix: str) -> None:
    """Remove the spill directories `prefix`PID-*.tmp in `root` whose process PID is not running
    (a name without a process id, or a process of another user, is left alone)."""
    for path in root.glob(f"{prefix}*-*.tmp"):
        pid = path.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True
