"""`speccat fit` (flows/cli_fit.py, flows/fit_engine.py): Llama-3.1-8B on 8 GPUs of
80 GiB at seq 8192 lists layouts that fit, and every listed total is recomputed here from the
catalogue's own tables (layer_prices, full_prices, kinds, specs) with the formulas by hand."""

from __future__ import annotations

import json

import duckdb
import pytest

from speccat.flows.cli import main

REPO = "meta-llama/Llama-3.1-8B-Instruct"
BUDGET = 80 * 2**30


def run_fit(db, capsys, *extra) -> dict:
    argv = ["fit", REPO, "--gpu-mem", "80GiB", "--seq", "8192", "--gpus", "8", "--db", str(db), "--json", "--top", "0", *extra]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_fit_lists_only_what_fits_by_the_catalogues_own_figures(snapshot_runs, capsys):
    out = run_fit(snapshot_runs.db, capsys, "--cp", "1")  # checked at cp 1
    rows = out["rows"]
    assert out["budget_bytes"] == BUDGET and len(rows) == out["fits"] >= 1
    s = 8192
    with duckdb.connect(str(snapshot_runs.db), read_only=True) as con:
        config_hash, h, vocab, layers = con.execute(
            "SELECT s.config_hash, hidden_size, vocab_size, num_hidden_layers FROM specs s JOIN repos r USING (config_hash) WHERE r.repo_id = ?", [REPO]
        ).fetchone()
        kind, att, ffn, norm = con.execute(
            "SELECT kind, params_attention, params_ffn_dense, params_norm FROM kinds WHERE config_hash = ?", [config_hash]
        ).fetchone()

        def price(tp, mask):
            setting = ("SELECT setting_id FROM settings WHERE seq_length = 8192 AND tp = ? AND cp = 1 AND micro_batch = 1 AND in_flight = 1 "
                       "AND stack = 'transformers' AND dropless_tok_factor = 1")
            if mask in (-1, "working"):
                column = "kept" if mask == -1 else "backward_peak"
                return con.execute(f"SELECT {column} FROM full_prices WHERE config_hash = ? AND kind = ? AND setting_id = ({setting})", [config_hash, kind, tp]).fetchone()[0]
            return con.execute(
                f"SELECT total FROM layer_prices WHERE config_hash = ? AND kind = ? AND mask = ? AND setting_id = ({setting})", [config_hash, kind, mask, tp]
            ).fetchone()[0]

        for row in rows:
            dp, tp, pp, zero = row["dp"], row["tp"], row["pp"], row["zero"]
            assert dp * tp * pp * row["cp"] == 8 and row["ep"] == 1
            per_layer = price(tp, row["mask"])
            # one layer's backward remakes the saves of the ops the set recomputes (all of them under full recompute)
            remade = price(tp, 0) - (0 if row["mask"] == -1 else per_layer)
            backward = remade + price(tp, "working")  # and then forms its gradients: the working set, priced
            stage_totals = []
            for i in range(pp):
                n = layers // pp + (1 if i < layers % pp else 0)
                flight = pp - i
                ends = s * 8.0 if i == 0 else 0.0  # the ids (the embedding's output is the first layer's input)
                head = 0.0
                if i == pp - 1:  # Llama's final RMSNorm (fp32 input, a statistic, bf16 output), then the head and loss
                    head = s * (h * 4 + 4 + h * 2) / tp + s * (h * 2 + vocab * 4 / tp + 8) + 12
                ends += head
                params = n * ((att + ffn) / tp + norm) + (vocab * h / tp if i == 0 else 0) + (h + vocab * h / tp if i == pp - 1 else 0)
                weight = 2 * params / (dp if zero == 3 else 1)
                grad = 4 * params / (dp if zero >= 2 else 1)
                optimizer = 12 * params / (dp if zero >= 1 else 1)
                # the eager loss's backward, once on the last stage: fp32 gradients of the
                # log-probabilities and of the logits over the rank's share of the vocabulary;
                # it runs before any layer's backward, so the larger of it and a layer's backward,
                # by which that micro-batch's head tensors are freed
                working = 2 * s * vocab * 4 / tp if i == pp - 1 else 0.0
                stage_totals.append(n * per_layer * flight + ends * flight + max(working, backward - head) + weight + grad + optimizer)
            assert row["remade"] == pytest.approx(remade, abs=1) and (remade == 0) == (row["mask"] == 0)
            assert row["backward"] == pytest.approx(backward, abs=1) and backward > remade
            assert row["total"] == pytest.approx(max(stage_totals), rel=1e-9), row
            assert row["total"] <= BUDGET
    assert rows == sorted(rows, key=lambda r: (r["recompute_s"] / r["dp"], r["total"], r["mask"]))


def test_a_tighter_budget_lists_fewer_and_recomputes_more(snapshot_runs, capsys):
    loose = run_fit(snapshot_runs.db, capsys)["rows"]
    assert main(["fit", REPO, "--gpu-mem", "20GiB", "--seq", "8192", "--gpus", "8", "--db", str(snapshot_runs.db), "--json", "--top", "0"]) == 0
    tight = json.loads(capsys.readouterr().out)["rows"]
    assert 0 < len(tight) < len(loose)
    assert all(r["total"] <= 20 * 2**30 for r in tight)
    assert any(r["mask"] != 0 for r in tight)  # something must be recomputed to fit


def test_held_fields_are_held(snapshot_runs, capsys):
    rows = run_fit(snapshot_runs.db, capsys, "--tp", "2", "--zero", "1")["rows"]
    assert rows and all(r["tp"] == 2 and r["zero"] == 1 for r in rows)


def test_an_unknown_repo_is_one_refused_line(snapshot_runs, capsys):
    assert main(["fit", "nobody/nothing", "--seq", "8192", "--gpus", "8", "--db", str(snapshot_runs.db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("speccat: not_found: ") and err.count("\n") == 1


def test_layouts_the_rules_refuse_are_left_out(snapshot_runs, capsys):
    # Llama-3.1-8B has 8 kv heads: tp 8 divides them, and 12 GPUs allow tp 1, 2, 4 (3, 6, 12 do not divide 32 heads)
    rows = run_fit(snapshot_runs.db, capsys, "--gpus", "12")["rows"]
    assert rows and {r["tp"] for r in rows} <= {1, 2, 4}
