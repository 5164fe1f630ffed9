"""catalogue/store/bounds.py: a publish's DuckDB connection is held to limits.yaml's memory bound
and spills into a directory of its own, which is gone after, and after a publish that died."""

from __future__ import annotations

import contextlib

import duckdb
import pytest
from support import store_runs as runs

from speccat.catalogue.store import file as store
from speccat.catalogue.store import lake as lakes
from speccat.catalogue.store.bounds import LIMITS
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
