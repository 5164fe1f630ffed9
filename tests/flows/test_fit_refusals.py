"""What `speccat fit` refuses, and what it flags (issue 27, item 2): every case that once gave
wrong advice with exit 0 ("nothing fits" for a layout that cannot be, "0 pairs fit on -8 GPUs",
80 bytes of memory, a model the night refused, a sequence past the model's positions) now
exits 2 with a reason of catalogue/vocabulary.yaml, or is priced with a flag on every row."""

from __future__ import annotations

import json
import shutil

import duckdb
import pytest
from support.refresh_runs import BROKEN_REPO

from speccat.catalogue.vocabulary import REASONS
from speccat.flows.cli import main

QWEN = "Qwen/Qwen3-8B"  # 32 heads, 8 kv heads, 36 layers, dense


def refused(capsys, argv: list[str]) -> tuple[str, str]:
    """(reason, message) of a refusal: exit 2, one line on stderr; the same as JSON with --json."""
    assert main(argv) == 2, argv
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("speccat: "), err
    reason, message = err[len("speccat: ") : -1].split(": ", 1)
    assert main([*argv, "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"] == {"reason": reason, "message": message}
    assert any(reason in codes for codes in REASONS.values())
    return reason, message


@pytest.mark.parametrize(
    "flag, value, said",
    [("--gpus", "-8", "at least 1"), ("--gpus", "0", "at least 1"), ("--seq", "0", "at least 1"), ("--micro-batch", "0", "at least 1"),
     ("--tp", "0", "at least 1"), ("--top", "-1", "at least 0"), ("--gpu-mem", "80", "with its unit"), ("--gpu-mem", "0GiB", "positive")],
)  # fmt: skip
def test_non_positive_counts_and_a_memory_without_a_unit_are_refused(capsys, tmp_path, flag, value, said):
    argv = ["fit", QWEN, "--seq", "8192", "--gpus", "8", "--db", str(tmp_path / "absent.duckdb"), flag, value]
    reason, message = refused(capsys, argv)  # refused before any catalogue is opened
    assert reason == "bad_argument" and said in message and flag in message


@pytest.mark.parametrize(
    "repo, extra, said",
    [
        (QWEN, ["--tp", "3"], "tp 3 does not divide 8 GPUs"),
        (QWEN, ["--tp", "16"], "tp 16 does not divide 8 GPUs"),
        (QWEN, ["--tp", "16", "--gpus", "16"], "tp 16 spans more than one node of the accelerator (8 GPUs)"),
        (QWEN, ["--pp", "8", "--tp", "2"], "tp 2 × pp 8 = 16 does not divide 8 GPUs"),
        (QWEN, ["--ep", "2"], "ep 2: the model has no routed experts"),
        (QWEN, ["--tp", "8", "--zero", "1"], "every layout of 8 GPUs with tp 8 has dp × cp = 1"),
        (QWEN, ["--pp", "64", "--gpus", "64"], "pp 64: the model has 36 layers"),
        # gemma-3-1b has 4 heads and 1 kv head: tp 8 is layouts.yaml's heads_tp
        ("google/gemma-3-1b-it", ["--tp", "8"], "4 attention heads are not divisible by tp 8 (heads_tp)"),
        # 8192 tokens split over tp 8 sequence-parallel ranks; 8196 do not (sequence_sharding)
        (QWEN, ["--tp", "8", "--seq", "8196"], "sequence 8196 is not divisible by its sharding: cp 1 x 8 sequence-parallel ranks (sequence_sharding)"),
    ],
)
def test_a_held_layout_that_cannot_be_is_infeasible_not_too_small(snapshot_runs, capsys, repo, extra, said):
    argv = ["fit", repo, "--seq", "8192", "--gpus", "8", "--gpu-mem", "80GiB", "--db", str(snapshot_runs.db), *extra]
    reason, message = refused(capsys, argv)
    assert reason == "infeasible" and said in message, message


def test_models_the_night_refused_are_refused_with_its_reason(snapshot_runs, capsys, tmp_path):
    # a fetch the night refused (no spec): its reason
    reason, message = refused(capsys, ["fit", BROKEN_REPO, "--seq", "4096", "--gpus", "8", "--db", str(snapshot_runs.db)])
    assert reason == "bad_json" and "refused it at the fetch stage" in message
    # a spec the night censused but would not price: a price failures row of the latest night
    db = tmp_path / "catalogue.duckdb"
    shutil.copy(snapshot_runs.db, db)
    with duckdb.connect(str(db)) as con:
        run_id = con.execute("SELECT run_id FROM latest_run").fetchone()[0]
        con.execute("INSERT INTO failures VALUES (?, ?, 'price', 'bad_value', 'priced beyond the tolerance of what the census measured')", [run_id, QWEN])
    reason, message = refused(capsys, ["fit", QWEN, "--seq", "4096", "--gpus", "8", "--db", str(db)])
    assert reason == "bad_value" and message.endswith("refused it at the price stage: priced beyond the tolerance of what the census measured")
    assert main(["fit", QWEN, "--seq", "4096", "--gpus", "8", "--db", str(snapshot_runs.db), "--json"]) == 0  # the night's own copy prices it


def test_a_sequence_past_the_positions_is_priced_and_flagged_in_every_row(snapshot_runs, capsys):
    base = ["fit", "openai-community/gpt2", "--gpus", "1", "--gpu-mem", "80GiB", "--db", str(snapshot_runs.db), "--top", "0"]
    assert main([*base, "--seq", "65536", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "beyond the model's 1024 positions" in out["beyond_positions"]
    assert out["rows"] and all(r["beyond_positions"] is True for r in out["rows"])
    assert main([*base, "--seq", "65536"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert "seq 65536 is beyond the model's 1024 positions" in text[0]
    start = next(i for i, line in enumerate(text) if line.startswith("--")) + 1  # the table's rows follow its rule
    rows = [line for line in text[start:] if line.strip() and not line.startswith("(")]
    assert rows and all(line.rstrip().endswith("beyond positions") for line in rows)
    assert main([*base, "--seq", "1024", "--json"]) == 0  # at the positions: no flag
    out = json.loads(capsys.readouterr().out)
    assert out["beyond_positions"] is None and not any(r["beyond_positions"] for r in out["rows"])


def test_json_bytes_are_whole_numbers(snapshot_runs, capsys):
    # Llama-3.1-8B over 8 data-parallel ranks at ZeRO 3: 2 B × params / 8 is no whole number of bytes
    argv = ["fit", "meta-llama/Llama-3.1-8B-Instruct", "--seq", "8192", "--gpus", "8", "--dp", "8", "--zero", "3", "--gpu-mem", "80GiB"]
    assert main([*argv, "--db", str(snapshot_runs.db), "--json", "--top", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert type(out["budget_bytes"]) is int and out["rows"]
    for row in out["rows"]:
        for field in ("total", "activations", "ends", "weight", "grad", "optimizer"):
            assert type(row[field]) is int, (field, row[field])
