"""The planners' wide table: `planner_layer_prices` answers "bytes per layer kind for this repo,
setting and switch set" in one SELECT with no join, every column described (DuckDB comments,
Parquet field metadata) with its unit in its name, and the export writes it under readable
partitions (seq=8192/tp=4/) that read back with DuckDB and pyarrow."""

from __future__ import annotations

import contextlib
import re

import duckdb
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import store_runs as runs

from speccat.catalogue.store.file import open_readonly
from speccat.flows.cli import main

QUANTITY = re.compile(r"_(bytes|tokens|count|ranks)$")
NOT_QUANTITIES = {"repo_id", "config_hash", "census_version", "records_version", "kind", "setting_id", "sequence_parallel",
                  "flash_attention", "cp_algo", "dtype", "mask", "switch_set"}  # fmt: skip


@pytest.fixture(scope="module")
def db() -> str:
    return str(runs.two_night_catalogue())


@pytest.fixture(scope="module")
def exported(db, tmp_path_factory):
    out = tmp_path_factory.mktemp("planner") / "export"
    assert main(["export", str(out), "--db", db]) == 0
    return out


def test_the_planners_question_is_one_select_with_no_join(db):
    question = (
        "SELECT kind, total_bytes FROM planner_layer_prices WHERE repo_id = ? AND seq_length_tokens = 8192 "
        "AND tp_ranks = 4 AND cp_ranks = 1 AND micro_batch_count = 1 AND switch_set = 'headCast,softmax' ORDER BY kind"
    )
    assert " JOIN " not in question.upper()
    with contextlib.closing(open_readonly(db)) as con:
        got = con.execute(question, [runs.ADDED]).fetchall()
        # the same from the tables, joined by hand
        want = con.execute(
            "SELECT p.kind, p.total FROM layer_prices p JOIN repos r USING (config_hash) JOIN settings s USING (setting_id) "
            "JOIN latest_run v ON v.census_version = p.census_version AND v.records_version = p.records_version "
            "WHERE r.repo_id = ? AND s.seq_length = 8192 AND s.tp = 4 AND s.cp = 1 AND s.micro_batch = 1 AND p.mask = 10 ORDER BY p.kind",
            [runs.ADDED],
        ).fetchall()
    assert runs.records().mask_of(["headCast", "softmax"]) == 10
    assert got == want and got


def test_every_column_states_its_unit_and_a_description(db):
    with contextlib.closing(open_readonly(db)) as con:
        columns = con.execute("SELECT column_name, comment FROM duckdb_columns() WHERE table_name = 'planner_layer_prices'").fetchall()
        assert columns
        for name, comment in columns:
            assert QUANTITY.search(name) or name in NOT_QUANTITIES, name
            assert comment and re.search(r"\[\S+\]$", comment), (name, comment)
        # every view's columns are commented, from its header
        uncommented = con.execute(
            "SELECT c.table_name, c.column_name FROM duckdb_columns() c JOIN duckdb_views() v ON v.view_name = c.table_name "
            "WHERE NOT v.internal AND c.comment IS NULL"
        ).fetchall()
        assert uncommented == []


def test_the_export_is_partitioned_by_readable_names_and_reads_back(db, exported):
    folder = exported / "planner_layer_prices"
    seqs = sorted(p.name for p in folder.iterdir())
    assert seqs == sorted(f"seq={s}" for s in {s["seq_length"] for s in runs.grid().settings})
    assert sorted(p.name for p in (folder / "seq=8192").iterdir()) == [f"tp={t}" for t in sorted({s["tp"] for s in runs.grid().settings})]
    with contextlib.closing(open_readonly(db)) as con:
        want = con.execute("SELECT count(*), sum(total_bytes) FROM planner_layer_prices").fetchone()
    got = duckdb.connect().execute(
        f"SELECT count(*), sum(total_bytes), count(DISTINCT seq) FROM read_parquet('{folder}/**/*.parquet', hive_partitioning = true)"
    ).fetchone()
    assert got[:2] == want and got[2] == 3
    table = ds.dataset(str(folder), format="parquet", partitioning="hive").to_table()
    assert table.num_rows == want[0]
    schema = pq.read_schema(next(folder.rglob("*.parquet")))
    for field in schema:
        assert field.metadata[b"description"] and field.metadata[b"unit"], field.name
    assert schema.field("total_bytes").metadata[b"unit"] == b"bytes"


def test_measured_and_failures_are_exported(db, exported):
    with contextlib.closing(open_readonly(db)) as con:
        for name in ("measured", "failures"):
            want = con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
            assert pq.read_table(exported / f"{name}.parquet").num_rows == want, name
