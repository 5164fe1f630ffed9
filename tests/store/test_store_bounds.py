"""catalogue/store/bounds.py: a publish's DuckDB connection is held to limits.yaml's memory bound
and spills into a directory of its own, which is gone after, and after a publish that died or a
process that was killed."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from support import store_runs as runs

from speccat.catalogue.store import file as store
from speccat.catalogue.store import lake as lakes
from speccat.catalogue.store.bounds import LIMITS, spill_directory
from speccat.catalogue.store.lake import Lake


def bound_setting() -> str:
    """How DuckDB states limits.yaml's bound, read off a connection set to it by hand."""
    with contextlib.closing(duckdb.connect()) as con:
        con.execute(f"SET memory_limit = '{int(LIMITS['publish_memory_mib'])}MiB'")
        return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]


def spy(monkeypatch, module, name: str) -> list[tuple[str, str]]:
    """Record the memory limit and spill directory of the connection `module.name` is called with."""
    seen, real = [], getattr(module, name)

    def recording(con, *args, **kwargs):
        seen.append(con.execute("SELECT current_setting('memory_limit'), current_setting('temp_directory')").fetchone())
        return real(con, *args, **kwargs)

    monkeypatch.setattr(module, name, recording)
    return seen


def test_a_file_publish_is_bounded_and_spills_beside_the_catalogue(tmp_path, monkeypatch):
    with contextlib.closing(duckdb.connect()) as con:
        default = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert bound_setting() != default  # the bound is not DuckDB's default (80% of this machine)
    seen = spy(monkeypatch, store, "store_night")
    path = tmp_path / "catalogue.duckdb"
    store.publish(path, runs.first_run())
    ((limit, spill),) = seen
    assert limit == bound_setting()
    assert spill.startswith(str(tmp_path / ".catalogue.duckdb.publish-spill-"))
    assert [p.name for p in tmp_path.iterdir() if "spill" in p.name] == []  # the spill directory is gone


def test_a_lake_publish_is_bounded(tmp_path, monkeypatch):
    seen = spy(monkeypatch, lakes, "stage")
    lakes.publish(Lake(str(tmp_path / "catalog.ducklake"), str(tmp_path / "data") + "/"), runs.first_run())
    ((limit, spill),) = seen
    assert limit == bound_setting() and "speccat-spill-" in spill


@pytest.mark.parametrize("spilled", [False, True])
def test_the_spill_of_a_publish_that_died_is_removed_by_the_next(tmp_path, spilled):
    path = tmp_path / "catalogue.duckdb"
    left = tmp_path / ".catalogue.duckdb.publish-spill-dead1234.tmp"
    left.mkdir()
    if spilled:
        (left / "duckdb_temp_storage-0.tmp").write_bytes(b"\0" * 4096)
    store.publish(path, runs.first_run())
    assert not left.exists()


def test_a_spill_directory_left_by_a_killed_process_is_removed_by_the_next(tmp_path):
    """A night killed with SIGKILL cannot remove its spill directory; the next spill directory of
    its prefix, in the same place, does. One of a process still running, and one whose name holds
    no process id, are left alone."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from speccat.catalogue.store.bounds import spill_directory\n"
         "with spill_directory(Path(sys.argv[1]), 'speccat-night-') as d:\n"
         "    (d / 'spilled.bin').write_bytes(bytes(1 << 20)); print(d, flush=True); time.sleep(600)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )
    killed = Path(child.stdout.readline().strip())
    running = tmp_path / f"speccat-night-{os.getpid()}-abc.tmp"
    unnamed = tmp_path / "speccat-night-abc.tmp"
    other = tmp_path / f"speccat-spill-{child.pid}-abc.tmp"  # another prefix: not this one's to sweep
    for path in (running, unnamed, other):
        path.mkdir()
    assert (killed / "spilled.bin").stat().st_size == 1 << 20
    child.kill()
    child.wait()
    assert killed.exists()  # SIGKILL: nothing in the child removed it

    with spill_directory(tmp_path, "speccat-night-") as new:
        assert new.name.startswith(f"speccat-night-{os.getpid()}-")
        assert not killed.exists()
        assert running.exists() and unnamed.exists() and other.exists()
    assert not new.exists()
