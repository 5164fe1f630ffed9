"""The inverse questions of `speccat fit` (issue 27, item 3; catalogue/records/inverse.py):
`--max-seq`, `--max-micro-batch`, `--min-gpus`. Each answer is recomputed here by pricing it
and the next value up (or every GPU count below), and sequence lengths off the settings grid
are priced at exactly the length asked for."""

from __future__ import annotations

import json

import pytest
from conftest import SNAPSHOT

from speccat.flows.cli import main

LLAMA_8B = SNAPSHOT / "meta-llama__Llama-3.1-8B-Instruct"
LLAMA_70B = SNAPSHOT / "meta-llama__Llama-3.1-70B-Instruct"


def fit_json(capsys, *argv) -> dict:
    assert main(["fit", *map(str, argv), "--json", "--top", "0"]) == 0
    return json.loads(capsys.readouterr().out)


# Llama-3.1-8B's 8.03e9 parameters at Megatron's 18 B each fill no 80 GiB GPU: pure bf16 Adam's 8 B do
PURE = ("--recipe", "pure_bf16_adam")


def test_max_seq_fits_and_256_more_tokens_do_not(capsys):
    base = (LLAMA_8B, "--gpus", 1, "--gpu-mem", "80GiB", *PURE)
    out = fit_json(capsys, *base, "--max-seq")
    n = out["question"]["answer"]
    assert out["question"]["ask"] == "max_seq" and n % 256 == 0 and n > 0 and not out["question"]["limited"]
    at = fit_json(capsys, *base, "--seq", n)
    above = fit_json(capsys, *base, "--seq", n + 256)
    assert at["fits"] >= 1 and above["fits"] == 0
    assert at["rows"] == out["rows"]  # the answer's rows are those of pricing that length


def test_max_micro_batch_fits_and_one_more_does_not(capsys):
    base = (LLAMA_8B, "--gpus", 1, "--gpu-mem", "80GiB", "--seq", 4096, *PURE)
    out = fit_json(capsys, *base, "--max-micro-batch")
    b = out["question"]["answer"]
    assert out["question"]["ask"] == "max_micro_batch" and b >= 1
    assert fit_json(capsys, *base, "--micro-batch", b)["fits"] >= 1
    assert fit_json(capsys, *base, "--micro-batch", b + 1)["fits"] == 0


def test_min_gpus_fits_and_no_fewer_gpus_do(capsys):
    from speccat.catalogue.records.layouts import LayoutError
    from speccat.flows.fit_engine import fits
    from speccat.flows.fit_spec import censused_now

    base = (LLAMA_70B, "--gpu-mem", "80GiB", "--seq", 8192)
    out = fit_json(capsys, *base, "--min-gpus")
    n = out["question"]["answer"]
    assert out["question"]["ask"] == "min_gpus" and n > 1
    assert fit_json(capsys, *base, "--gpus", n)["fits"] >= 1
    # every count below, tried one by one (not only those the search tries)
    name, spec, _ = censused_now(str(LLAMA_70B))
    for fewer in range(1, n):
        try:
            rows = fits(spec, name, "H100-SXM", gpus=fewer, seq=8192, budget=80 * 2**30)
        except LayoutError:
            rows = []
        assert rows == [], fewer


def test_an_off_grid_sequence_is_priced_at_its_length_not_a_grid_point(capsys):
    # The settings grid holds 4096 and 8192. Under flash attention Llama's layers keep a fixed
    # number of bytes per token (no s² term), so a single-GPU layout's activations at 5000
    # tokens are exactly 5000/4096 of those at 4096: a price rounded to a grid point is not.
    def activations(seq):
        rows = fit_json(capsys, LLAMA_8B, "--gpus", 1, "--gpu-mem", "200GiB", "--seq", seq)["rows"]
        return next(r["activations"] for r in rows if r["switch_set"] == "none")

    at_4096, at_5000 = activations(4096), activations(5000)
    assert at_5000 == pytest.approx(at_4096 * 5000 / 4096, abs=1)


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--max-seq", "--seq", "4096", "--gpus", "1"], "--max-seq searches the sequence length: leave --seq out"),
        (["--min-gpus", "--seq", "4096", "--gpus", "8"], "--min-gpus searches the GPU count: leave --gpus out"),
        (["--max-micro-batch", "--micro-batch", "2", "--seq", "4096", "--gpus", "1"], "--max-micro-batch searches the micro-batch: leave --micro-batch out"),
        (["--max-seq", "--min-gpus"], "one of --max-seq, --max-micro-batch, --min-gpus at a time"),
        (["--gpus", "1"], "--seq is required (or --max-seq)"),
        (["--seq", "4096"], "--gpus is required (or --min-gpus)"),
    ],
)
def test_a_question_and_the_value_it_searches_are_not_both_given(capsys, tmp_path, argv, said):
    assert main(["fit", str(tmp_path / "absent.json"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("speccat: bad_argument: ") and said in err, err


def test_nothing_fits_at_the_smallest_value_is_said(capsys):
    out = fit_json(capsys, LLAMA_8B, "--gpus", 1, "--gpu-mem", "80GiB", "--max-seq")  # 18 B/param: 135 GiB of states
    assert out["question"]["answer"] is None and out["fits"] == 0 and out["rows"] == []
    assert main(["fit", str(LLAMA_8B), "--gpus", "1", "--gpu-mem", "80GiB", "--max-seq"]) == 0
    assert capsys.readouterr().out.startswith("longest sequence that fits: none: nothing fits at 256 tokens\n")
