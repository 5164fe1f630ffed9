"""Loss kernels in the store: the tables loss_prices and losses, the night's validation of
loss_prices (catalogue/store/night.py `_check_loss_prices`), and the planner's SQL reading the
kernel the variable `loss` names (sql/macros/rank_stages.sql)."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
from support import store_runs as runs

from speccat.catalogue.records.ends import load_ends
from speccat.catalogue.store.file import open_readonly, publish
from speccat.catalogue.store.night import StoreError

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
QWEN = "Qwen/Qwen3-0.6B"  # tied word embeddings


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    path = tmp_path_factory.mktemp("losses") / "catalogue.duckdb"
    publish(path, runs.make_run("night-losses", [runs.censused(LLAMA), runs.censused(QWEN)]))
    with contextlib.closing(open_readonly(path)) as con:
        yield con


def test_every_setting_priced_has_every_kernel_and_the_default_is_the_ends_logits(catalogue):
    ends = load_ends(runs.records())
    assert catalogue.execute("SELECT loss, is_default FROM losses ORDER BY loss").fetchall() == sorted(
        (name, name == ends.default_loss) for name in ends.losses)
    lacking = catalogue.execute(
        "SELECT count(*) FROM (SELECT DISTINCT p.config_hash, p.setting_id, l.loss FROM full_prices AS p, losses AS l) AS w "
        "ANTI JOIN loss_prices AS x USING (config_hash, setting_id, loss)").fetchone()[0]  # fmt: skip
    assert lacking == 0
    # end_prices' logits are the model's own loss's
    differ = catalogue.execute(
        "SELECT count(*) FROM end_prices AS e JOIN loss_prices AS x USING (config_hash, setting_id) "
        "WHERE x.loss = 'eager' AND x.kept_bytes <> e.logits").fetchone()[0]  # fmt: skip
    assert differ == 0


def test_llama_at_4096_by_hand(catalogue):
    """Llama-3.1-8B (h 4096, V 128256) at seq 4096, tp 1, one micro-batch, bf16."""
    s, h, v = 4096, 4096, 128256
    rows = dict(catalogue.execute(
        "SELECT x.loss, [x.kept_bytes, x.working_bytes] FROM loss_prices AS x JOIN settings AS g USING (setting_id) "
        "JOIN repos AS r USING (config_hash) WHERE r.repo_id = ? AND g.stack = 'transformers' AND g.seq_length = ? AND g.tp = 1 "
        "AND g.cp = 1 AND g.micro_batch = 1", [LLAMA, s]).fetchall())  # fmt: skip
    assert rows["eager"] == [s * (h * 2 + v * 4 + 8) + 8 + 4, 2 * s * v * 4]
    assert rows["chunked"] == [s * (h * 2 + 8) + 8, 3 * v * h * 2 + 256 * h * 2 + s * h * 2]
    # Liger: cdiv(128256, 4096) = 32, cdiv(4096, 32) = 128 tokens a chunk (a power of two already)
    assert rows["fused-linear"] == [s * h * 2 + v * h * 2, 128 * v * 2 + s * (4 + h * 2)]


def last_stage(con, loss: str | None) -> tuple:
    """(loss, ends, loss working set, total) of Llama's last stage at pp 2, nothing recomputed."""
    con.execute("SET VARIABLE pp = 2")
    con.execute("SET VARIABLE repo_id = ?", [LLAMA])
    if loss is not None:
        con.execute("SET VARIABLE loss = ?", [loss])
    try:
        return con.execute(
            "SELECT loss, ends_bytes, loss_working_bytes, total_bytes FROM rank_stages('rank_fits_layout') "
            "WHERE stack = 'transformers' AND seq_length_tokens = 4096 AND tp_ranks = 1 AND cp_ranks = 1 AND mask = 0 AND stage = 1").fetchone()  # fmt: skip
    finally:
        for name in ("pp", "repo_id", "loss"):
            con.execute(f"RESET VARIABLE {name}")


def test_the_variable_loss_chooses_the_kernel_the_rank_holds(catalogue):
    """At pp 2 the last stage holds the head for its one micro-batch: another kernel changes its
    ends by the logits' difference, and its working set, nothing else."""
    prices = dict(catalogue.execute(
        "SELECT x.loss, [x.kept_bytes, x.working_bytes] FROM loss_prices AS x JOIN settings AS g USING (setting_id) "
        "JOIN repos AS r USING (config_hash) WHERE r.repo_id = ? AND g.stack = 'transformers' AND g.seq_length = 4096 AND g.tp = 1 "
        "AND g.cp = 1 AND g.micro_batch = 1", [LLAMA]).fetchall())  # fmt: skip
    eager = last_stage(catalogue, None)  # the default: the model's own
    assert eager[0] == "eager" and eager == last_stage(catalogue, "eager") and eager[2] == prices["eager"][1]
    for loss in ("chunked", "fused-linear"):
        name, ends, working, total = last_stage(catalogue, loss)
        assert name == loss and working == prices[loss][1]
        assert ends - eager[1] == pytest.approx(prices[loss][0] - prices["eager"][0], rel=1e-12)
        assert total - eager[3] == pytest.approx(ends - eager[1] + working - eager[2], rel=1e-9)
    assert last_stage(catalogue, "focal") is None  # a kernel no row prices: nothing to read


def test_a_run_lacking_a_kernel_at_a_setting_is_refused():
    run = runs.make_run("night-bad", [runs.censused(QWEN)])
    (config_hash,) = run.loss_prices
    rows = list(run.loss_prices[config_hash])
    with pytest.raises(StoreError) as err:
        dataclasses.replace(run, loss_prices={config_hash: rows[1:]}).arrow_tables()
    assert err.value.reason == "bad_run" and "must price each loss kernel" in str(err.value)
    bad = [{**rows[0], "working_bytes": float("nan")}, *rows[1:]]
    with pytest.raises(StoreError) as err:
        dataclasses.replace(run, loss_prices={config_hash: bad}).arrow_tables()
    assert "finite and not negative" in str(err.value)
