"""Fixtures shared by the refresh tests (a pytest plugin: `pytest_plugins = ["support.refresh_runs"]` in tests/conftest.py).

- `prefect_api`: one Prefect API for the session (prefect_test_harness: a temporary database)
  and a fresh result store, so the first census of a config in a session is a real one.
- `snapshot_runs`: the shipped snapshot plus one broken config, refreshed twice into one
  catalogue (cold, censusing everything, then warm with nothing changed); the catalogue is
  copied between the runs so the tests can compare them. Several tests share these runs. Neither
  night writes its report (`report=False`): no test reads it, and the report of the whole
  snapshot takes seconds each night (the nights that write theirs: test_reliability_hub.py).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import SNAPSHOT

BROKEN_REPO = "speccat-test/broken-config"
# A config cut off mid-file, as a failed upload leaves it.
BROKEN_TEXT = '{\n  "architectures": ["LlamaForCausalLM"],\n  "model_type": "llama",\n  "hidden_si'
# Tables that record each run rather than the catalogue's content.
RUN_TABLES = ("runs", "repo_history", "failures", "crawls")


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory):
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    results = tmp_path_factory.mktemp("prefect-results")
    with prefect_test_harness(server_startup_timeout=120):
        with temporary_settings({PREFECT_RESULTS_LOCAL_STORAGE_PATH: results}):
            yield results


def run_refresh(**parameters) -> tuple[Any, dict]:
    """Run the flow; return its final state and the counts it returned."""
    from speccat.flows.refresh import refresh

    state = refresh(**parameters, return_state=True)
    return state, state.result(raise_on_failure=False)


def copy_snapshot(destination: Path, repo_ids: list[str] | None = None) -> Path:
    """The shipped snapshot (or the named repos of it) in a folder of its own."""
    destination.mkdir(parents=True, exist_ok=True)
    for folder in sorted(SNAPSHOT.glob("*/")):
        repo_id = folder.name.replace("__", "/", 1)
        if (folder / "config.json").is_file() and (repo_ids is None or repo_id in repo_ids):
            shutil.copytree(folder, destination / folder.name)
    return destination


def add_config(snapshot: Path, repo_id: str, text: str) -> None:
    folder = snapshot / repo_id.replace("/", "__", 1)
    folder.mkdir()
    (folder / "config.json").write_text(text)


def rows(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def table_differences(a: Path, b: Path, tables) -> dict[str, tuple[int, int]]:
    """For each table, how many rows only `a` has and how many only `b` has (as multisets: what
    `a EXCEPT ALL b` and `b EXCEPT ALL a` count, NULLs equal to NULLs).

    Both files' rows are counted per distinct row in one grouping of their union, and a row
    counts as many times as one file holds it more often than the other: one pass over each
    table, where the two EXCEPT ALLs each numbered every row (the price tables of the
    snapshot's night hold millions)."""
    out = {}
    with duckdb.connect() as con:
        con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
        con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
        for table in tables:
            # Columns as text: the two files' ENUM types are distinct types.
            cols = [r[0] for r in con.execute(f"SELECT name FROM pragma_table_info('a.main.{table}')").fetchall()]
            cast = ", ".join(f'"{c}"::VARCHAR AS c{i}' for i, c in enumerate(cols))
            keys = ", ".join(f"c{i}" for i in range(len(cols)))
            counted = (
                f"SELECT count(*) FILTER (WHERE side = 'a') AS in_a, count(*) FILTER (WHERE side = 'b') AS in_b "
                f"FROM (SELECT {cast}, 'a' AS side FROM a.{table} UNION ALL SELECT {cast}, 'b' AS side FROM b.{table}) GROUP BY {keys}"
            )
            only_a, only_b = con.execute(
                f"SELECT coalesce(sum(greatest(in_a - in_b, 0)), 0), coalesce(sum(greatest(in_b - in_a, 0)), 0) FROM ({counted})"
            ).fetchone()
            out[table] = (int(only_a), int(only_b))
    return out


@dataclass(frozen=True)
class SnapshotRuns:
    snapshot: Path
    db: Path
    after_cold: Path  # a copy of `db` taken between the two runs
    cold_state: Any
    cold: dict
    warm_state: Any
    warm: dict


@pytest.fixture(scope="session")
def snapshot_runs(prefect_api, tmp_path_factory) -> SnapshotRuns:
    base = tmp_path_factory.mktemp("snapshot-runs")
    snapshot = copy_snapshot(base / "snapshot")
    add_config(snapshot, BROKEN_REPO, BROKEN_TEXT)
    db = base / "catalogue.duckdb"
    # Cold: every config censused now (--rebuild), whatever other tests left in the cache.
    cold_state, cold = run_refresh(source="snapshot", snapshot_dir=str(snapshot), db=str(db), rebuild=True, report=False)
    after_cold = base / "after-cold.duckdb"
    shutil.copy(db, after_cold)
    warm_state, warm = run_refresh(source="snapshot", snapshot_dir=str(snapshot), db=str(db), report=False)
    return SnapshotRuns(snapshot, db, after_cold, cold_state, cold, warm_state, warm)
