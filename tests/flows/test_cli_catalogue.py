"""`speccat query`, `speccat show`, `speccat export` (flows/cli_catalogue.py, docs/catalogue.md)."""

from __future__ import annotations

import contextlib
import csv
import io
import json

import duckdb
import pytest
from support import store_runs as runs

from speccat.catalogue.store.export import MANIFEST, PARTITIONED, WHOLE
from speccat.catalogue.store.present import human_bytes
from speccat.catalogue.store.file import open_readonly
from speccat.flows.cli import main


@pytest.fixture(scope="module")
def db() -> str:
    return str(runs.two_night_catalogue())


def speccat(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_query_named_file_as_csv(db, capsys):
    code, out, _ = speccat(capsys, "query", "failures_by_reason", "--db", db, "--format", "csv", "-p", "run_id=night-2")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {(r["stage"], r["reason"]) for r in rows} == {
        (f["stage"], f["reason"]) for f in runs.second_run().failures
    }


def test_query_sql_text_as_json(db, capsys):
    code, out, _ = speccat(capsys, "query", "SELECT run_id, n_repos FROM runs ORDER BY run_id", "--db", db, "--format", "json")
    assert code == 0
    assert json.loads(out) == [
        {"run_id": "night-1", "n_repos": len(runs.first_run().repos)},
        {"run_id": "night-2", "n_repos": len(runs.second_run().repos)},
    ]


def test_query_file_path_and_readable_table(db, capsys, tmp_path):
    path = tmp_path / "mine.sql"
    path.write_text("SELECT 3 * 2 ^ 30 AS total, 'x' AS name;")
    code, out, _ = speccat(capsys, "query", str(path), "--db", db)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["total", "name"]
    assert lines[2].split() == ["3.00", "GiB", "x"]  # a byte column in binary units
    assert lines[-1] == "(1 row)"


def test_query_errors_are_one_line(db, capsys, tmp_path):
    code, _, err = speccat(capsys, "query", "no_such_query", "--db", db)
    assert code == 2 and "fits_budget" in err and len(err.strip().splitlines()) == 1
    code, _, err = speccat(capsys, "query", "latest_spec", "--db", db)
    assert code == 2 and err.startswith("speccat: not_found: ") and "did you mean latest_specs" in err
    code, _, err = speccat(capsys, "query", "latest_specs", "--db", str(tmp_path / "none.duckdb"))
    assert code == 3 and "no catalogue" in err
    code, _, err = speccat(capsys, "query", "SELECT * FROM nowhere", "--db", db)
    assert code == 2 and err.startswith("speccat: bad_query: ") and "nowhere" in err and err.count("\n") == 1
    code, _, err = speccat(capsys, "query", "latest_specs", "--db", db, "-p", "oops")
    assert code == 2 and "NAME=VALUE" in err


def test_show_prints_spec_kinds_and_prices(db, capsys):
    item = runs.censused("deepseek-ai/DeepSeek-V3")
    code, out, _ = speccat(capsys, "show", item.repo_id, "--db", db, "--seq", "8192", "--tp", "8")
    assert code == 0
    for kind in item.spec["ops"]:
        assert f"\n{kind} " in out
    setting = next(
        s["setting_id"] for s in runs.grid().settings
        if (s["seq_length"], s["tp"], s["cp"], s["micro_batch"]) == (8192, 8, 1, 1)
    )
    counts = {}
    for g in item.spec["layers"]:
        counts[g["kind"]] = counts.get(g["kind"], 0) + g["count"]
    none = sum(
        counts[r["kind"]] * r["total"]
        for r in item.prices.layer_prices.to_pylist()
        if r["setting_id"] == setting and r["mask"] == 0
    )
    full = sum(counts[r["kind"]] * r["kept"] for r in item.prices.full_prices.to_pylist() if r["setting_id"] == setting)
    lines = out.splitlines()
    assert any(line.startswith("none ") and line.endswith(human_bytes(none)) for line in lines)
    assert any(line.startswith("full ") and line.endswith(human_bytes(full)) for line in lines)


def test_show_json(db, capsys):
    item = runs.censused(runs.ADDED)
    code, out, _ = speccat(capsys, "show", item.repo_id, "--db", db, "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["repo"]["hidden_size"] == item.spec["hidden_size"]
    assert shown["setting"]["seq_length"] == 4096 and shown["setting"]["tp"] == 1
    # none, each switch alone, all, and full, for each kind
    n_sets = 1 + len(runs.records().switches) + 1 + 1
    assert len(shown["prices"]) == n_sets * len(item.spec["ops"])
    assert [k["kind"] for k in shown["kinds"]] == list(item.spec["ops"])


def test_show_unknown_repo_and_setting(db, capsys):
    code, _, err = speccat(capsys, "show", "nobody/nothing", "--db", db)
    assert code == 2 and err.startswith("speccat: not_found: ") and "nobody/nothing" in err
    code, _, err = speccat(capsys, "show", "Qwen/Qwen3-8", "--db", db)  # a miss names the nearest ids
    assert code == 2 and "did you mean Qwen/Qwen3-8B" in err
    code, _, err = speccat(capsys, "show", runs.ADDED, "--db", db, "--seq", "1000")
    assert code == 2 and "the grid has seq" in err


def test_show_matches_ignoring_case_and_prints_a_failure(db, capsys):
    code, out, _ = speccat(capsys, "show", runs.ADDED.upper(), "--db", db, "--json")
    assert code == 0 and json.loads(out)["repo"]["repo_id"] == runs.ADDED
    code, out, _ = speccat(capsys, "show", runs.BROKEN, "--db", db)  # night 2 could not parse its config
    assert code == 0 and out == f"{runs.BROKEN} failed at census: bad_json: config.json: line 1 (night night-2, " + out.split("(night night-2, ")[1]
    code, out, _ = speccat(capsys, "show", runs.BROKEN, "--db", db, "--json")
    assert json.loads(out)["failure"]["reason"] == "bad_json"


def test_units_print_every_byte_figure_one_way(db, capsys):
    text = "SELECT 3 * 2 ^ 30 AS total, 1536 AS kept"
    outs = {}
    for units in ("human", "bytes", "MiB", "GiB"):
        code, out, _ = speccat(capsys, "query", text, "--db", db, "--units", units)
        outs[units] = out.splitlines()[2].split()
    assert outs == {
        "human": ["3.00", "GiB", "1.50", "KiB"],
        "bytes": ["3,221,225,472", "B", "1,536", "B"],
        "MiB": ["3,072.00", "MiB", "0.00", "MiB"],
        "GiB": ["3.00", "GiB", "0.00", "GiB"],
    }


def test_speccat_db_points_the_read_commands_at_a_catalogue(db, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECCAT_DB", db)
    monkeypatch.chdir(tmp_path)  # no catalogue.duckdb here
    code, out, _ = speccat(capsys, "query", "SELECT run_id FROM latest_run", "--format", "csv")
    assert (code, out) == (0, "run_id\nnight-2\n")
    assert speccat(capsys, "show", runs.ADDED)[0] == 0


def test_export_reads_back_as_the_tables(db, capsys, tmp_path):
    out_dir = tmp_path / "export"
    code, out, _ = speccat(capsys, "export", str(out_dir), "--db", db)
    assert code == 0 and "layer_prices" in out
    manifest = json.loads((out_dir / MANIFEST).read_text())
    assert manifest["latest_run"]["run_id"] == "night-2"
    partitions = sorted(p.name for p in (out_dir / "layer_prices").iterdir())
    assert partitions == sorted(f"setting_id={s['setting_id']}" for s in runs.grid().settings)
    con = duckdb.connect()
    with contextlib.closing(open_readonly(db)) as cat:
        for name in PARTITIONED:
            columns = [d[0] for d in cat.execute(f"SELECT * FROM {name} LIMIT 0").description]
            select = ", ".join(columns)
            want = cat.execute(f"SELECT {select} FROM {name} ORDER BY ALL").fetchall()
            got = con.execute(
                f"SELECT {select} FROM read_parquet('{out_dir / name}/**/*.parquet', hive_partitioning = true) ORDER BY ALL"
            ).fetchall()
            assert got == want, name
            assert manifest["tables"][name] == len(want)
        for name in WHOLE:
            want = cat.execute(f"SELECT * FROM {name} ORDER BY ALL").fetchall()
            got = con.execute(f"SELECT * FROM read_parquet('{out_dir / (name + '.parquet')}') ORDER BY ALL").fetchall()
            # as text, sorted as text: an ENUM column (measured.op) sorts by its position in the catalogue, as VARCHAR in Parquet
            assert sorted(tuple(map(str, r)) for r in got) == sorted(tuple(map(str, r)) for r in want), name


def test_export_replaces_its_own_folder_but_not_others(db, capsys, tmp_path):
    out_dir = tmp_path / "export"
    assert speccat(capsys, "export", str(out_dir), "--db", db)[0] == 0
    (out_dir / "layer_prices" / "stale.parquet").write_text("old")
    assert speccat(capsys, "export", str(out_dir), "--db", db)[0] == 0
    assert not (out_dir / "layer_prices" / "stale.parquet").exists()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    code, _, err = speccat(capsys, "export", str(foreign), "--db", db)
    assert code == 2 and "not a speccat export" in err
    assert (foreign / "notes.txt").read_text() == "keep me"
