"""The store's bounds (catalogue/store/limits.yaml): how long a publish waits for a lock
(catalogue/store/file.py), and the memory a publish's DuckDB connection may hold, past which it
spills to disk.

Without a memory bound DuckDB may take 80% of the machine's memory, and a first night's merge
of millions of price rows (into a lake above all, whose merge reads back what it wrote) took
all of it, on top of what the flow itself holds."""

from __future__ import annotations

import contextlib
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
    """A directory to spill into, named `prefix`..., removed after: in `near` (the catalogue's
    own disk), or in the system's temporary directory (a lake, whose data may not be on a local
    disk)."""
    if near is not None:
        near.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=prefix, suffix=".tmp", dir=near) as path:
        yield Path(path)
