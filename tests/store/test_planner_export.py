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
from support import store_runs as runs

from speccat.catalogue.store.file import open_readonly
from speccat.flows.cli import main

QUANTITY = re.compile(r"_(bytes|tokens|count|ranks|flops|pct)$")
NOT_QUANTITIES = {"repo_id", "config_hash", "census_version", "transformers_version", "torch_version", "records_version", "kind", "setting_id", "sequence_parallel",
                  "flash_attention", "cp_algo", "dtype", "mask", "switch_set", "stack", "equivalents", "setting_label", "param_casts",
                  "grouped_gemm", "dropless_tok_factor", "capacity_factor"}  # fmt: skip
WIDE = ("planner_layer_prices", "frontier")


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
        "AND tp_ranks = 4 AND cp_ranks = 1 AND micro_batch_count = 1 AND stack = 'transformers' AND switch_set = 'headCast,softmax' ORDER BY kind"
    )
    assert " JOIN " not in question.upper()
    with contextlib.closing(open_readonly(db)) as con:
        got = con.execute(question, [runs.ADDED]).fetchall()
        # the same from the tables, joined by hand
        want = con.execute(
            "SELECT p.kind, p.total FROM layer_prices p JOIN repos r USING (config_hash) JOIN settings s USING (setting_id) "
            "JOIN latest_run v ON v.census_version = p.census_version AND v.transformers_version = p.transformers_version "
            "AND v.torch_version = p.torch_version AND v.records_version = p.records_version "
            "WHERE r.repo_id = ? AND s.seq_length = 8192 AND s.tp = 4 AND s.cp = 1 AND s.micro_batch = 1 AND s.stack = 'transformers' "
            "AND p.mask = 10 ORDER BY p.kind",
            [runs.ADDED],
        ).fetchall()
    assert runs.records().mask_of(["headCast", "softmax"]) == 10
    assert got == want and got
    assert len({kind for kind, _ in got}) == len(got)  # one row per kind: the stack tells the two stacks' rows apart


READABLE = ("stack", "seq_length_tokens", "micro_batch_count", "tp_ranks", "cp_ranks", "sequence_parallel", "flash_attention", "cp_algo",
            "dtype", "in_flight_count", "param_casts", "grouped_gemm", "dropless_tok_factor", "capacity_factor")  # fmt: skip


def test_rows_differ_in_a_readable_setting_column_never_in_the_hash_alone(db):
    """Two rows of a repo, kind and switch set differ in some readable setting column, and the
    label names every field of the setting as settings.yaml orders them, as `speccat price` prints it."""
    with contextlib.closing(open_readonly(db)) as con:
        total, distinct = con.execute(
            f"SELECT count(*), count(DISTINCT (repo_id, kind, mask, {', '.join(READABLE)})) FROM planner_layer_prices"
        ).fetchone()
        assert total == distinct > 0
        stacks = {r[0] for r in con.execute("SELECT DISTINCT stack FROM planner_layer_prices").fetchall()}
        assert stacks == {"transformers", "megatron"}
        labels = con.execute("SELECT DISTINCT setting_id, setting_label FROM planner_layer_prices").fetchall()
        settings = {row[0]: row for row in con.execute("SELECT * FROM settings").fetchall()}
        fields = [d[0] for d in con.execute("SELECT * FROM settings LIMIT 0").description]
    for setting_id, label in labels:
        row = dict(zip(fields, settings[setting_id]))
        words = " ".join(f"{name}={str(row[name]).lower() if isinstance(row[name], bool) else row[name]}" for name in runs.grid().fields)
        assert label == words, (label, words)


@pytest.mark.parametrize("view", WIDE)
def test_every_column_states_its_unit_and_a_description(db, view):
    with contextlib.closing(open_readonly(db)) as con:
        columns = con.execute("SELECT column_name, comment FROM duckdb_columns() WHERE table_name = ?", [view]).fetchall()
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


def test_the_frontier_question_is_one_select_with_no_join(db):
    """ "Which switch sets are worth it for this repo at seq 8192, tp 4?" from the view alone, equal
    to the stored switch_costs frontier joined by hand, walked from no recompute to full."""
    question = (
        "SELECT kind, mask, kept_bytes, recompute_flops, overhead_pct FROM frontier WHERE repo_id = ? AND seq_length_tokens = 8192 "
        "AND tp_ranks = 4 AND cp_ranks = 1 AND micro_batch_count = 1 AND stack = 'transformers' "
        "AND sequence_parallel AND flash_attention ORDER BY kind, kept_bytes DESC"
    )
    assert " JOIN " not in question.upper()
    with contextlib.closing(open_readonly(db)) as con:
        got = con.execute(question, [runs.ADDED]).fetchall()
        want = con.execute(
            "SELECT c.kind, c.mask, coalesce(p.total, f.kept), c.recompute_flops, 100 * c.recompute_flops / c.step_flops "
            "FROM switch_costs c JOIN repos r USING (config_hash) JOIN settings s USING (setting_id) "
            "JOIN latest_run v ON v.census_version = c.census_version AND v.records_version = c.records_version "
            "JOIN full_prices f ON f.config_hash = c.config_hash AND f.kind = c.kind AND f.setting_id = c.setting_id "
            "AND f.census_version = c.census_version AND f.records_version = c.records_version "
            "LEFT JOIN layer_prices p ON p.config_hash = c.config_hash AND p.kind = c.kind AND p.setting_id = c.setting_id "
            "AND p.mask = c.mask AND p.census_version = c.census_version AND p.records_version = c.records_version "
            "WHERE r.repo_id = ? AND s.seq_length = 8192 AND s.tp = 4 AND s.cp = 1 AND s.micro_batch = 1 AND s.stack = 'transformers' "
            "AND s.sequence_parallel AND s.flash_attention AND c.on_frontier AND c.representative = c.mask ORDER BY 1, 3 DESC",
            [runs.ADDED],
        ).fetchall()
    assert got == want and len(got) >= 3
    # the walk starts at no recompute (it costs nothing, so nothing beats it) and full recompute is on it
    assert got[0][1] == 0 and got[0][3] == 0 and got[0][4] == 0 and -1 in {r[1] for r in got}


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


def test_the_frontier_is_exported_described_and_reads_back(db, exported):
    folder = exported / "frontier"
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"seq={s}" for s in {s["seq_length"] for s in runs.grid().settings})
    with contextlib.closing(open_readonly(db)) as con:
        want = con.execute("SELECT count(*), sum(kept_bytes), sum(recompute_flops), sum(n_equivalent_count) FROM frontier").fetchone()
    got = duckdb.connect().execute(
        f"SELECT count(*), sum(kept_bytes), sum(recompute_flops), sum(n_equivalent_count) "
        f"FROM read_parquet('{folder}/**/*.parquet', hive_partitioning = true)"
    ).fetchone()
    assert got == pytest.approx(want, rel=1e-12) and want[0] > 0
    assert ds.dataset(str(folder), format="parquet", partitioning="hive").to_table().num_rows == want[0]
    schema = pq.read_schema(next(folder.rglob("*.parquet")))
    for field in schema:
        assert field.metadata[b"description"] and field.metadata[b"unit"], field.name
    assert schema.field("recompute_flops").metadata[b"unit"] == b"flops"
    assert schema.field("overhead_pct").metadata[b"unit"] == b"percent"
    with contextlib.closing(open_readonly(db)) as con:
        stored = con.execute("SELECT count(*) FROM switch_costs").fetchone()[0]
    assert duckdb.connect().execute(
        f"SELECT count(*) FROM read_parquet('{exported}/switch_costs/**/*.parquet', hive_partitioning = true)"
    ).fetchone()[0] == stored


@pytest.mark.parametrize("name, params", [("masks_ranked", {}), ("cheapest_saving", {"at_least_pct": 40})])
def test_the_queries_print_the_setting_readably(db, name, params):
    """masks_ranked and cheapest_saving name each row's setting by its label, beside the hash,
    and at the megatron stack the label says megatron."""
    from speccat.catalogue.store import present

    with contextlib.closing(open_readonly(db)) as con:
        labels = dict(con.execute("SELECT setting_id, setting_label FROM setting_labels").fetchall())
        for stack in ("transformers", "megatron"):
            result = present.run(con, present.resolve_query(name), {"repo_id": runs.ADDED, "stack": stack, **params})
            rows = [dict(zip(result.columns, row)) for row in result.rows]
            assert rows and result.columns[:2] == ("setting_id", "setting_label")
            for row in rows:
                assert row["setting_label"] == labels[row["setting_id"]] and row["setting_label"].startswith(f"stack={stack} ")
