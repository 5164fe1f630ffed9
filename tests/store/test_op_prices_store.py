"""The memory curve in the store: the tables op_prices and switch_kept, the views repo_op_prices
and repo_curve, the flow's `priced` (sql/steps/stored.sql) and the night's validation of
op_prices (catalogue/store/night.py `_check_op_prices`)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import shutil
from functools import cache

import duckdb
import pytest
from support import store_runs as runs

from speccat.catalogue.records.layouts import infeasible, split
from speccat.catalogue.store.file import open_readonly, publish, stored
from speccat.catalogue.store.night import StoreError

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
GEMMA = "google/gemma-3-1b-it"  # tp 8 is infeasible: 4 heads (layouts.yaml heads_tp)
QWEN_NEXT = "Qwen/Qwen3-Next-80B-A3B-Thinking"  # two kinds: full and linear attention
REPOS = (LLAMA, GEMMA, QWEN_NEXT)


@cache
def as_the_flow_prices(repo_id: str) -> tuple[runs.Censused, list[dict]]:
    """A censused config as the flow stores it (flows/analysis.py): no prices, end prices or op
    costs at a grid setting where a kind cannot be laid out, a row of infeasible_settings instead
    (store_runs.censused prices every setting)."""
    item = runs.censused(repo_id)
    rows = infeasible(item.spec, runs.records(), runs.grid())
    skip = {r["setting_id"] for r in rows}
    return dataclasses.replace(
        item,
        prices=split(item.prices, rows),
        end_prices=tuple(r for r in item.end_prices if r["setting_id"] not in skip),
        loss_prices=tuple(r for r in item.loss_prices if r["setting_id"] not in skip),
        op_costs=tuple(r for r in item.op_costs if r["setting_id"] not in skip),
    ), rows


def items(repo_ids=REPOS) -> list[runs.Censused]:
    return [as_the_flow_prices(r)[0] for r in repo_ids]


@cache
def the_run(repo_ids=REPOS, run_id: str = "night-curve"):
    run = runs.make_run(run_id, items(repo_ids), day=1)
    rows = {as_the_flow_prices(r)[0].config_hash: as_the_flow_prices(r)[1] for r in repo_ids}
    return dataclasses.replace(run, infeasible={h: r for h, r in rows.items() if r})


def grid_ids() -> list[str]:
    """The grid's settings (the run's also hold the memory curve's, which the flow never asks about)."""
    return [s["setting_id"] for s in runs.grid().settings]


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    path = tmp_path_factory.mktemp("curve") / "catalogue.duckdb"
    publish(path, the_run())
    return path


def query(path, sql: str, parameters=None) -> list[tuple]:
    with contextlib.closing(open_readonly(path)) as con:
        return con.execute(sql, parameters or []).fetchall()


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


# -- the tables -----------------------------------------------------------------------------


def test_the_tables_hold_the_runs_rows(catalogue):
    run = the_run()
    for item in items():
        got = query(
            catalogue,
            "SELECT kind, setting_id, part, op, kept_bytes, full_bytes FROM op_prices WHERE config_hash = ? ORDER BY ALL",
            [item.config_hash],
        )
        want = sorted(tuple(r[c] for c in ("kind", "setting_id", "part", "op", "kept_bytes", "full_bytes")) for r in item.op_prices)
        assert got == want and got
    kept = query(catalogue, "SELECT mask, op FROM switch_kept ORDER BY ALL")
    assert kept == sorted((r["mask"], r["op"]) for r in run.switch_kept)


# -- repo_curve against repo_prices ---------------------------------------------------------


def test_repo_curve_equals_repo_prices_where_the_grid_holds_the_setting(catalogue):
    keys = "repo_id, setting_id, coalesce(mask, -1), switch_set"
    curve = {r[:4]: r[4] for r in query(catalogue, f"SELECT {keys}, total_bytes FROM repo_curve")}
    prices = {r[:4]: r[4] for r in query(catalogue, f"SELECT {keys}, total FROM repo_prices")}
    grid = set(grid_ids())
    curve_ids = {s["setting_id"] for s in runs.grid().curve}
    # every (repo, setting, switch set) either view holds at a setting of both grid and curve, the other holds too
    shared = {k for k in curve if k[1] in grid}
    assert shared == {k for k in prices if k[1] in curve_ids}
    for key in shared:
        assert close(curve[key], prices[key]), (key, curve[key], prices[key])
    assert {k[0] for k in shared} == set(REPOS)
    assert {-1, 0, runs.records().n_masks - 1} <= {k[2] for k in shared}
    assert any(k[3] == "full" for k in shared)
    at = {
        r[0]: r[1:]
        for r in query(catalogue, "SELECT setting_id, seq_length, stack FROM settings WHERE setting_id IN (SELECT setting_id FROM repo_curve)")
    }
    assert len({at[k[1]][0] for k in shared}) >= 3
    assert {at[k[1]][1] for k in shared} == {"transformers", "megatron"}


def test_repo_curve_reaches_lengths_the_grid_lacks(catalogue):
    grid_lengths = {s["seq_length"] for s in runs.grid().settings}
    lengths = {r[0] for r in query(catalogue, "SELECT DISTINCT seq_length_tokens FROM repo_curve")}
    assert {1024, 1_048_576} <= lengths - grid_lengths
    assert lengths == {s["seq_length"] for s in runs.grid().curve}
    per_repo = dict(query(catalogue, "SELECT repo_id, count(DISTINCT seq_length_tokens) FROM repo_curve GROUP BY ALL"))
    assert per_repo == {r: len(lengths) for r in REPOS}


def test_repo_curve_has_no_infeasible_layout(catalogue):
    tps = dict(query(catalogue, "SELECT repo_id, list(DISTINCT tp_ranks ORDER BY tp_ranks) FROM repo_curve GROUP BY ALL"))
    assert tps[GEMMA] == [1]
    assert tps[LLAMA] == tps[QWEN_NEXT] == [1, 8]
    # every curve setting but those where a kind of the repo cannot be laid out
    curve = runs.grid().with_settings(runs.grid().curve)
    held = set(query(catalogue, "SELECT DISTINCT repo_id, setting_id FROM repo_curve"))
    for item in items():
        skip = {r["setting_id"] for r in infeasible(item.spec, runs.records(), curve)}
        assert {s for r, s in held if r == item.repo_id} == {s["setting_id"] for s in curve.settings} - skip
    # none of the grid's infeasible settings (gemma's tp 8) is in the curve
    refused = query(catalogue, "SELECT DISTINCT config_hash, setting_id FROM infeasible_settings")
    assert {h for h, _ in refused} == {as_the_flow_prices(GEMMA)[0].config_hash}
    assert query(catalogue, "SELECT count(*) FROM repo_curve AS c JOIN infeasible_settings AS i USING (config_hash, setting_id)") == [(0,)]
    assert query(catalogue, "SELECT count(*) FROM repo_prices AS p JOIN infeasible_settings AS i USING (config_hash, setting_id)") == [(0,)]


# -- repo_op_prices against planner_layer_prices --------------------------------------------


def test_repo_op_prices_add_up_to_the_layer_prices(catalogue):
    n_masks = runs.records().n_masks
    masks = sorted({0, 1, 5, 37, 100, n_masks // 2, n_masks - 2, n_masks - 1})
    op_sums = query(
        catalogue,
        "SELECT repo_id, kind, setting_id, mask, sum(kept_bytes), any_value(full_recompute_bytes) FROM repo_op_prices"
        " WHERE list_contains(?, mask) GROUP BY ALL",
        [masks],
    )
    layer = {
        r[:4]: r[4:]
        for r in query(
            catalogue,
            "SELECT repo_id, kind, setting_id, mask, total_bytes, full_recompute_bytes FROM planner_layer_prices WHERE list_contains(?, mask)",
            [masks],
        )
    }
    compared = set()
    for repo_id, kind, setting_id, mask, summed, full in op_sums:
        key = (repo_id, kind, setting_id, mask)
        if key not in layer:
            continue  # a curve setting the grid lacks
        total, full_layer = layer[key]
        assert close(summed, total), (key, summed, total)
        assert full == full_layer, key
        compared.add(key)
    assert {k[3] for k in compared} == set(masks)
    assert {k[0] for k in compared} == set(REPOS)
    curve_ids = {s["setting_id"] for s in runs.grid().curve}
    assert compared == {k for k in layer if k[2] in curve_ids}


def test_an_op_a_set_drops_keeps_nothing(catalogue):
    records = runs.records()
    rows = query(catalogue, "SELECT repo_id, kind, setting_id, op, part, mask, kept_bytes FROM repo_op_prices WHERE mask IN (0, ?)", [records.n_masks - 1])
    base = {r[:5]: r[6] for r in rows if r[5] == 0}
    last = {r[:5]: r[6] for r in rows if r[5] == records.n_masks - 1}
    assert base.keys() == last.keys()
    kept = records.kept(records.n_masks - 1)
    dropped_nonzero = 0
    for key, value in last.items():
        op = key[3]
        if op in kept:
            assert value == base[key], key
        else:
            assert value == 0.0, key
            dropped_nonzero += base[key] > 0
    assert dropped_nonzero > 0  # the check bites: ops the last set drops keep bytes under set 0
    # and at mask 0 every row is the table's own
    table = {
        (r[0], r[1], r[2], r[3], r[4]): r[5]
        for r in query(
            catalogue,
            "SELECT p.repo_id, o.kind, o.setting_id, o.op, o.part, o.kept_bytes FROM op_prices AS o JOIN repos AS p USING (config_hash)",
        )
    }
    assert table == base


# -- `priced` for the flow ------------------------------------------------------------------


def test_a_catalogue_without_op_prices_is_not_priced_until_published_again(tmp_path, catalogue):
    path = tmp_path / "catalogue.duckdb"
    shutil.copyfile(catalogue, path)
    run = the_run()
    held = stored(path, run.census_version, run.records_version, grid_ids())
    assert held.specs == held.priced == frozenset(run.specs)
    with contextlib.closing(duckdb.connect(str(path))) as con:
        before = sorted(con.execute("SELECT * FROM op_prices").fetchall())
        con.execute("DELETE FROM op_prices")
    assert before
    held = stored(path, run.census_version, run.records_version, grid_ids())
    assert held.specs == frozenset(run.specs) and held.priced == frozenset()
    assert query(path, "SELECT count(*) FROM repo_curve") == [(0,)]
    publish(path, run)
    assert sorted(query(path, "SELECT * FROM op_prices")) == before
    assert stored(path, run.census_version, run.records_version, grid_ids()).priced == frozenset(run.specs)


# -- the night's validation -----------------------------------------------------------------


def fingerprint(path) -> tuple[str, list[str]]:
    """The catalogue file's bytes (a refused publish must not touch it) and the files beside it."""
    return hashlib.sha256(path.read_bytes()).hexdigest(), sorted(p.name for p in path.parent.iterdir())


def with_op_prices(run, config_hash: str, rows: list[dict]):
    return dataclasses.replace(run, op_prices={**run.op_prices, config_hash: rows})


@pytest.fixture
def existing(tmp_path, catalogue):
    """A copy of the published catalogue, to publish bad runs onto."""
    path = tmp_path / "catalogue.duckdb"
    shutil.copyfile(catalogue, path)
    return path


def refused(path, bad) -> StoreError:
    """The StoreError `bad` is refused with, by validation or by publish, checking the catalogue is unchanged."""
    before = fingerprint(path)
    with pytest.raises(StoreError) as err:
        bad.validate()
        bad.arrow_tables()
    with pytest.raises(StoreError) as again:
        publish(path, bad)
    assert (again.value.reason, str(again.value)) == (err.value.reason, str(err.value))
    assert fingerprint(path) == before
    return err.value


@pytest.mark.parametrize("repo_id", [QWEN_NEXT, GEMMA])
def test_a_run_lacking_one_op_price_row_is_refused(existing, repo_id):
    run = the_run()
    item = as_the_flow_prices(repo_id)[0]
    rows = list(run.op_prices[item.config_hash])
    assert len({r["kind"] for r in rows}) == 2
    for drop in (0, len(rows) // 2, len(rows) - 1):
        bad = with_op_prices(run, item.config_hash, rows[:drop] + rows[drop + 1 :])
        err = refused(existing, bad)
        assert err.reason == "bad_run"
        assert f"op_prices[{item.config_hash!r}]" in str(err) and "every kind at every setting" in str(err)


def test_a_run_stating_a_setting_not_among_its_settings_is_refused(existing):
    run = the_run()
    item = as_the_flow_prices(QWEN_NEXT)[0]
    rows = run.op_prices[item.config_hash]
    # a real setting, but not one the run states (3,000 tokens is neither grid nor curve)
    outside = runs.grid().setting({"seq_length": 3000})["setting_id"]
    assert outside not in {s["setting_id"] for s in run.settings}
    moved = rows[0]["setting_id"]
    bad = with_op_prices(run, item.config_hash, [r | {"setting_id": outside} if r["setting_id"] == moved else r for r in rows])
    err = refused(existing, bad)
    assert err.reason == "bad_run" and "not among the run's settings" in str(err) and outside in str(err)


def test_a_run_with_bad_op_price_bytes_or_a_duplicate_is_refused(existing):
    run = the_run()
    item = as_the_flow_prices(LLAMA)[0]
    rows = list(run.op_prices[item.config_hash])
    for bad_rows, words in (
        (rows + [rows[3]], "once"),
        ([rows[0] | {"kept_bytes": -1.0}, *rows[1:]], "not negative"),
        ([rows[0] | {"full_bytes": float("nan")}, *rows[1:]], "not negative"),
        ([r | {"kind": "other"} if i == 0 else r for i, r in enumerate(rows)], "kinds priced"),
    ):
        err = refused(existing, with_op_prices(run, item.config_hash, bad_rows))
        assert err.reason == "bad_run" and words in str(err)


def test_a_single_kind_run_lacking_one_op_price_row_is_refused(tmp_path):
    """One kind (Llama's decoder): a row missing still leaves every kind at every (setting, part,
    op) the config states, so the night's own check (`_check_op_prices`) lets it through and it
    is the publish's checks (sql/steps/checks.sql, `check_failed`) that refuse it. The catalogue
    must not hold Llama yet: merge.sql adds no op_prices at a setting a config has them at."""
    path = tmp_path / "catalogue.duckdb"
    publish(path, the_run((GEMMA, QWEN_NEXT), "night-0"))
    run = the_run()
    item = as_the_flow_prices(LLAMA)[0]
    rows = list(run.op_prices[item.config_hash])
    assert len({r["kind"] for r in rows}) == 1
    bad = with_op_prices(run, item.config_hash, rows[1:])
    before = fingerprint(path)
    with contextlib.closing(open_readonly(path)) as con:
        rows_before = runs.dump(con)
    with pytest.raises(StoreError) as err:
        publish(path, bad)
    assert err.value.reason in ("bad_run", "check_failed"), str(err.value)
    assert "op_prices" in str(err.value) and item.config_hash in str(err.value)
    assert fingerprint(path) == before
    with contextlib.closing(open_readonly(path)) as con:
        assert runs.dump(con) == rows_before
