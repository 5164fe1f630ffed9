"""The DuckLake path: two writers publishing different runs into one SQLite-catalogued lake."""

from __future__ import annotations

import contextlib
import pickle
import subprocess
import sys
import textwrap

import pytest
from support import store_runs as runs

from speccat.catalogue.store import lake as lakes
from speccat.catalogue.store import file as store
from speccat.catalogue.store.lake import Lake, lake_ddl, open_lake
from speccat.catalogue.store.night import StoreError
from speccat.catalogue.store.file import REFERENCE_TABLES, TABLES, open_readonly

pytestmark = pytest.mark.slow

WRITER = textwrap.dedent(
    """
    import pickle, sys
    from speccat.catalogue.store.lake import Lake, publish
    with open(sys.argv[3], "rb") as f:
        run = pickle.load(f)
    result = publish(Lake(sys.argv[1], sys.argv[2]), run)
    print(result.attempts)
    """
)


def lake_content(lake: Lake) -> dict[str, list[tuple]]:
    with open_lake(lake) as con:
        return runs.dump(con)


def test_two_writers_both_land_and_the_lake_reads_like_the_file(tmp_path):
    lake = Lake(f"sqlite:{tmp_path / 'lake' / 'catalog.sqlite'}", str(tmp_path / "lake" / "data") + "/")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writers = []
    # Night 2 brings every config it lists, so either writer may land first.
    nights = (runs.first_run(), runs.second_run(self_contained=True))
    for n, run in enumerate(nights):
        run_file = tmp_path / f"run{n}.pickle"
        run_file.write_bytes(pickle.dumps(run))
        writers.append(
            subprocess.Popen(
                [sys.executable, str(script), lake.catalog, lake.data_path, str(run_file)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [w.communicate(timeout=300) for w in writers]
    for writer, (out, err) in zip(writers, outputs):
        assert writer.returncode == 0, err
        assert int(out.strip()) >= 1
    single = tmp_path / "catalogue.duckdb"
    for run in nights:
        store.publish(single, run)
    got = lake_content(lake)
    with contextlib.closing(open_readonly(single)) as con:
        want = runs.dump(con)
        want_changes = con.execute("SELECT repo_id, change FROM changes ORDER BY ALL").fetchall()
    for table in TABLES:
        assert got[table] == want[table], table
    # the views exist in the lake and read its tables
    with open_lake(lake) as con:
        assert con.execute("SELECT repo_id, change FROM changes ORDER BY ALL").fetchall() == want_changes


def test_the_same_run_twice_into_a_lake_changes_nothing(tmp_path):
    lake = Lake(str(tmp_path / "catalog.ducklake"), str(tmp_path / "data") + "/")
    lakes.publish(lake, runs.first_run())
    before = lake_content(lake)
    lakes.publish(lake, runs.first_run())
    assert lake_content(lake) == before
    assert len(before["runs"]) == 1


def test_lake_tables_have_no_enums_or_keys():
    import duckdb

    from speccat.catalogue.store.file import stage

    con = duckdb.connect()
    stage(con, runs.first_run(), {})
    ddl = lake_ddl(con)
    assert len(ddl) == len(TABLES) + len(REFERENCE_TABLES)
    assert not any("ENUM" in s or "PRIMARY KEY" in s for s in ddl)
    failures = next(s for s in ddl if s.startswith('CREATE TABLE IF NOT EXISTS "failures" '))
    assert '"reason" VARCHAR NOT NULL' in failures


def test_an_unreachable_lake_is_a_clear_error(tmp_path):
    lake = Lake(str(tmp_path / "missing-dir" / "x" / "catalog.ducklake"), str(tmp_path / "data"))
    with pytest.raises(StoreError) as err:
        lakes.publish(lake, runs.first_run())
    assert err.value.reason == "lake" and "catalog.ducklake" in str(err.value)


def test_a_lake_tells_what_it_holds_as_the_file_does(tmp_path):
    """lake.stored / lake.load_specs answer the flow's plan stage as store.stored / load_specs
    do for a file with the same runs; a lake not created yet holds nothing and is not created."""
    run = runs.first_run()
    grid = [s["setting_id"] for s in runs.grid().settings]
    cv, rv = run.census_version, run.records_version
    catalog = tmp_path / "catalog.ducklake"
    lake = Lake(str(catalog), str(tmp_path / "data") + "/")
    empty = store.Stored(frozenset(), frozenset())
    assert lakes.stored(lake, cv, rv, grid) == empty and not catalog.exists()
    assert lakes.stored(Lake(f"sqlite:{tmp_path / 'none.sqlite'}", str(tmp_path / "d")), cv, rv, grid) == empty
    assert not (tmp_path / "none.sqlite").exists()

    lakes.publish(lake, run)
    single = tmp_path / "catalogue.duckdb"
    store.publish(single, run)
    for census, records, ids in ((cv, rv, grid), (cv, rv, grid + ["a-setting-not-priced"]), (cv, "other", grid)):
        assert lakes.stored(lake, census, records, ids) == store.stored(single, census, records, ids)
    held = lakes.stored(lake, cv, rv, grid)
    assert held.specs == held.priced == frozenset(run.specs)
    some = sorted(run.specs)[:2]
    assert lakes.load_specs(lake, cv, some) == store.load_specs(single, cv, some) == {h: run.specs[h] for h in some}
    assert lakes.load_specs(lake, cv) == run.specs
