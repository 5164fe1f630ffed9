"""The table fits_on (sql/steps/fits_on.sql) and `speccat query fits_on`: what fits for every
model at once, built by the night from the stored prices. Its answers are `speccat fit`'s: 20
questions sampled from the snapshot night's table are asked of `speccat fit` itself, which
prices the repo's stored spec again in memory and searches every layout of the GPUs (each ZeRO
stage, each ep), where the night tried only the layouts that can rank first."""

from __future__ import annotations

import json
import math
import random

import duckdb
import pytest

from speccat.flows.cli import main

FIELDS = ("dp", "tp", "pp", "cp", "ep", "zero", "mask")


def table_rows(db, where: str = "true") -> list[dict]:
    with duckdb.connect(str(db), read_only=True) as con:
        rel = con.sql(f"SELECT * FROM repo_fits_on WHERE {where}")
        return [dict(zip(rel.columns, row)) for row in rel.fetchall()]


def sampled(rows: list[dict], n_fit: int, n_none: int, seed: int = 27) -> list[dict]:
    """`n_fit` questions that some layout answers and `n_none` that none does, a mixture-of-experts
    model among the first, in a fixed random order."""
    rng = random.Random(seed)
    fitting = sorted((r for r in rows if r["fits"]), key=lambda r: (r["repo_id"], r["stack"], r["seq_length"], r["gpus"], r["gpu_mem_gib"]))
    none = sorted((r for r in rows if not r["fits"]), key=lambda r: (r["repo_id"], r["stack"], r["seq_length"], r["gpus"], r["gpu_mem_gib"]))
    moe = [r for r in fitting if r["ep"] is not None and r["repo_id"].startswith(("mistralai/Mixtral", "deepseek-ai/DeepSeek-V3"))]
    return [rng.choice(moe), *rng.sample(fitting, n_fit - 1), *rng.sample(none, n_none)]


def test_fits_on_answers_as_fit_does_for_20_sampled_questions(snapshot_runs, capsys):
    rows = table_rows(snapshot_runs.db)
    with duckdb.connect(str(snapshot_runs.db), read_only=True) as con:
        repos = con.execute("SELECT count(DISTINCT repo_id) FROM repo_fits_on").fetchone()[0]
        sizes = [s for (s,) in con.execute("SELECT gpu_mem_gib FROM fits_on_sizes ORDER BY 1").fetchall()]
    assert sizes == [24, 40, 48, 80, 96, 141, 192]
    assert len(rows) == repos * 2 * 3 * 11 * 7  # stacks x grid lengths x GPU counts x sizes, every question answered
    for row in sampled(rows, 14, 6):
        argv = ["fit", row["repo_id"], "--gpu-mem", f"{row['gpu_mem_gib']}GiB", "--gpus", str(row["gpus"]), "--seq", str(row["seq_length"]),
                "--stack", row["stack"], "--db", str(snapshot_runs.db), "--json", "--top", "1"]  # fmt: skip
        assert main(argv) == 0
        out = json.loads(capsys.readouterr().out)
        question = f"{row['repo_id']} {row['stack']} seq {row['seq_length']} on {row['gpus']} x {row['gpu_mem_gib']} GiB"
        assert out["recipe"]["name"] == row["recipe"] and out["accelerator"] == row["accelerator"], question
        if not row["fits"]:
            assert out["fits"] == 0, question
            continue
        first = out["rows"][0]
        assert tuple(first[f] for f in FIELDS) == tuple(row[f] for f in FIELDS), question
        assert first["total"] == math.ceil(row["total_bytes"]), question
        assert first["stage"] == row["fullest_stage"] and first["recompute_s_per_seq"] == pytest.approx(row["recompute_s_per_seq"], abs=1e-12)
        assert first["beyond_positions"] == row["beyond_positions"], question


def test_query_fits_on_lists_every_model_that_fits_best_first(snapshot_runs, capsys):
    argv = ["query", "fits_on", "-p", "gpu_mem=80GiB", "-p", "gpus=8", "-p", "seq=32768", "--db", str(snapshot_runs.db), "--format", "json"]
    assert main(argv) == 0
    listed = json.loads(capsys.readouterr().out)
    expected = table_rows(snapshot_runs.db, "gpu_mem_gib = 80 AND gpus = 8 AND seq_length = 32768 AND stack = 'transformers'")
    assert sorted(r["repo_id"] for r in listed) == sorted(r["repo_id"] for r in expected if r["fits"])
    assert 0 < len(listed) < len(expected)  # some models fit 8 x 80 GiB at 32k, some do not
    assert all(r["total_bytes"] <= 80 * 2**30 and r["dp"] * r["tp"] * r["pp"] * r["cp"] == 8 for r in listed)
    keys = [(r["overhead_pct"], -r["headroom_bytes"]) for r in listed]
    assert keys == sorted(keys)


@pytest.mark.parametrize(
    "params, words",
    [
        (["gpu_mem=80", "gpus=8", "seq=32768"], "gpu_mem 80: give GiB"),
        (["gpu_mem=81GiB", "gpus=8", "seq=32768"], "gpu_mem 81GiB is not a size the table holds: 24GiB, 40GiB"),
        (["gpu_mem=80GiB", "gpus=3", "seq=32768"], "gpus 3 is not a count the table holds: 1, 2, 4, 8, 16"),
        (["gpu_mem=80GiB", "gpus=8", "seq=5000"], "seq 5000 is not a sequence length the table holds: 4096, 8192, 32768"),
        (["gpus=8", "seq=5000"], "gpu_mem is required"),
    ],
)
def test_query_fits_on_refuses_a_question_the_table_cannot_answer(snapshot_runs, capsys, params, words):
    argv = ["query", "fits_on", *[a for p in params for a in ("-p", p)], "--db", str(snapshot_runs.db)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "bad_query" in err and words in err


def test_leaving_out_outclassed_switch_sets_changes_nothing_fit_lists(snapshot_runs):
    """rank_stages leaves out, for a layout asking only_fitting, the switch sets another set beats
    in every kind's bytes and seconds: fitting_sets lists the same rows with and without them."""
    with duckdb.connect(str(snapshot_runs.db), read_only=True) as con:
        setting_ids = [s for (s,) in con.execute(
            "SELECT setting_id FROM settings WHERE seq_length = 8192 AND tp = 2 AND cp = 2 AND micro_batch = 1 AND in_flight = 1 "
            "AND dropless_tok_factor = 1").fetchall()]  # fmt: skip
        assert len(setting_ids) == 2  # both stacks, even expert loads
        layouts = [(i, dp, pp, ep, zero, s) for i, (dp, pp, ep, zero) in enumerate([(4, 1, 1, 0), (2, 2, 2, 1), (1, 4, 1, 3), (4, 2, 4, 3)])
                   for s in setting_ids]  # fmt: skip
        listed = {}
        for only in (True, False):
            con.execute("CREATE OR REPLACE TEMP TABLE tried (layout INTEGER, dp INTEGER, pp INTEGER, ep INTEGER, zero INTEGER, vpp INTEGER, etp INTEGER, "
                        "setting_id VARCHAR, recipe VARCHAR, budget_bytes DOUBLE, accelerator VARCHAR, only_fitting BOOLEAN)")  # fmt: skip
            con.executemany("INSERT INTO tried VALUES (?, ?, ?, ?, ?, 1, NULL, ?, 'megatron_bf16_adam', ?, 'MI300X', ?)",
                            [(n * 2 + j, dp, pp, ep, zero, s, 192 * 2**30, only) for n, (i, dp, pp, ep, zero, s) in enumerate(layouts) for j in (0,)])  # fmt: skip
            rel = con.sql("SELECT repo_id, layout, setting_id, mask, total_bytes, recompute_s FROM fitting_sets('tried')")
            listed[only] = sorted(rel.fetchall())
            con.execute("DROP TABLE tried")
    assert listed[True] == listed[False]
    repos = {r[0] for r in listed[True]}
    assert {"mistralai/Mixtral-8x7B-v0.1", "meta-llama/Llama-3.1-8B-Instruct"} <= repos  # an MoE and a dense model
    assert len({r[3] for r in listed[True]}) > 2  # several switch sets are on some layout's frontier


def test_leaving_out_overshadowed_stages_changes_no_layouts_fullest_rank(snapshot_runs):
    """rank_stages leaves out, for a layout asking only_fitting, a middle stage whose stage before
    it holds at least as much of everything (1F1B's later middle stages hold as many layers or
    fewer, with fewer micro-batches in flight): each layout's fullest stage, its bytes and the
    sets that fit are the same with and without them, and the stages left out are many."""
    with duckdb.connect(str(snapshot_runs.db), read_only=True) as con:
        setting_ids = [s for (s,) in con.execute(
            "SELECT setting_id FROM settings WHERE seq_length = 4096 AND tp = 1 AND cp = 1 AND micro_batch = 1 AND in_flight = 1 "
            "AND dropless_tok_factor = 1").fetchall()]  # fmt: skip
        layouts = [(dp, pp, s) for dp, pp in [(1, 8), (2, 4), (1, 16)] for s in setting_ids]
        fullest, stages = {}, {}
        for only in (True, False):
            con.execute("CREATE OR REPLACE TEMP TABLE tried (layout INTEGER, dp INTEGER, pp INTEGER, ep INTEGER, zero INTEGER, vpp INTEGER, etp INTEGER, "
                        "setting_id VARCHAR, recipe VARCHAR, budget_bytes DOUBLE, accelerator VARCHAR, only_fitting BOOLEAN)")  # fmt: skip
            con.executemany("INSERT INTO tried VALUES (?, ?, ?, 1, 1, 1, NULL, ?, 'megatron_bf16_adam', ?, 'MI300X', ?)",
                            [(n, dp, pp, s, 192 * 2**30, only) for n, (dp, pp, s) in enumerate(layouts)])  # fmt: skip
            rel = con.sql("SELECT repo_id, layout, setting_id, mask, fullest_stage, total_bytes, fits FROM rank_layouts('tried')")
            fullest[only] = {row[:4]: row[4:] for row in rel.fetchall()}
            stages[only] = con.execute("SELECT count(*) FROM rank_stages('tried')").fetchone()[0]
            con.execute("DROP TABLE tried")
    assert fullest[True] and set(fullest[True]) <= set(fullest[False])
    assert {k: fullest[False][k] for k in fullest[True]} == fullest[True]
    # every fitting (repo, layout, setting, set) of the full search that only_fitting keeps (its set not outclassed) is there
    kept_sets = {(k[0], k[2], k[3]) for k in fullest[True]}
    assert {k for k, v in fullest[False].items() if v[2] and (k[0], k[2], k[3]) in kept_sets} <= set(fullest[True])
    rows_per_set = stages[True] / len(fullest[True])
    assert rows_per_set < 4  # of 8 or 16 stages, a layout keeps the first, the last and few between
