"""Distinct switch sets and the frontier (catalogue/records/frontier.py), for every kind and
setting of every shipped config, from the specs the snapshot refresh stored: every set is on
the frontier or dominated by a set that is, and equivalent sets are really equal."""

from __future__ import annotations

import numpy as np
import pytest

from speccat.catalogue.records.cost import load_costs, op_costs
from speccat.catalogue.records.frontier import FULL, frontier
from speccat.catalogue.records.pricing import price_layers
from speccat.census.version import CENSUS_VERSION


def fronts(specs, records, grid):
    costs = load_costs(records)
    for config_hash, spec in sorted(specs.items()):
        prices = price_layers(spec, records, grid)
        oc = op_costs(spec, records, grid, costs)
        flops, moved = oc.masks(records)
        yield spec, prices, oc, frontier(prices, flops, moved, *oc.forward()), config_hash


@pytest.fixture(scope="module")
def shipped_fronts(snapshot_runs, records, grid):
    from speccat.catalogue.store.file import load_specs

    specs = load_specs(snapshot_runs.db, CENSUS_VERSION)
    assert len(specs) >= 30
    return list(fronts(specs, records, grid))


def test_every_set_is_on_the_frontier_or_dominated_by_one_that_is(shipped_fronts):
    for spec, _, _, front, _ in shipped_fronts:
        on = front.on_frontier
        assert on.any(axis=2).all(), spec["name"]
        for k in range(on.shape[0]):
            for i in range(on.shape[1]):
                kept, flops, moved = front.kept[k, i], front.flops[k, i], front.moved[k, i]
                # le[q, p]: q is <= p in all three; lt[q, p]: q is < p in one
                le = (kept[:, None] <= kept) & (flops[:, None] <= flops) & (moved[:, None] <= moved)
                lt = (kept[:, None] < kept) | (flops[:, None] < flops) | (moved[:, None] < moved)
                f = on[k, i]
                assert le[f][:, ~f].any(axis=0).all(), (spec["name"], k, i)  # each other point is covered by a frontier point
                assert not (le & lt)[:, f].any(), (spec["name"], k, i)  # and nothing beats a frontier point


def test_equivalent_sets_are_really_equal(shipped_fronts, records):
    distinct = total = 0
    for spec, prices, oc, front, _ in shipped_fronts:
        name = spec["name"]
        flops, moved = oc.masks(records)
        rep = front.representative
        for part in (prices.attention, prices.ffn, prices.norm, prices.total, flops, moved):
            assert np.array_equal(np.take_along_axis(part, rep.astype(np.int64), axis=2), part), name
        masks = np.arange(records.n_masks)
        assert (rep <= masks).all() and (rep[..., 0] == 0).all()
        # a representative differs from every lower mask: classes are whole
        for k in range(rep.shape[0]):
            for i in range(rep.shape[1]):
                reps = np.unique(rep[k, i])
                keys = {(prices.attention[k, i, m], prices.ffn[k, i, m], prices.norm[k, i, m], flops[k, i, m], moved[k, i, m]) for m in reps}
                assert len(keys) == len(reps), name
                distinct += len(reps)
                total += records.n_masks
    assert distinct < total / 2  # most of the 256 sets are duplicates (the issue counted 36,656 of 294,912)


def test_gather_never_changes_anything_and_att_up_only_for_mla(shipped_fronts, records):
    gather, att_up = records.mask_of(["gather"]), records.mask_of(["attUp"])
    mla = 0
    for spec, _, _, front, _ in shipped_fronts:
        assert (front.representative[..., gather] == 0).all(), spec["name"]
        if "kv_lora_rank" in spec:
            mla += 1
            assert (front.representative[..., att_up] == att_up).all(), spec["name"]
        else:
            assert (front.representative[..., att_up] == 0).all(), spec["name"]
    assert mla >= 3  # DeepSeek-V2-Lite, V3, R1, V3.2


def test_the_catalogue_stores_each_configs_costs_and_frontier(shipped_fronts, snapshot_runs, records, grid):
    """The night's switch_costs rows are the fronts computed here, and the view `frontier`
    lists exactly each (kind, setting)'s frontier representatives, full recompute included,
    each with its class and the bytes it keeps and saves."""
    import duckdb

    costs = load_costs(records)
    with duckdb.connect(str(snapshot_runs.db), read_only=True) as con:
        priced = {h for (h,) in con.execute("SELECT DISTINCT config_hash FROM full_prices").fetchall()}
        checked = 0
        for spec, prices, oc, front, config_hash in shipped_fronts:
            if config_hash not in priced:
                continue
            infeasible = {s for (s,) in con.execute(
                "SELECT DISTINCT setting_id FROM infeasible_settings WHERE config_hash = ?", [config_hash]).fetchall()}
            rows = con.execute(
                "SELECT kind, setting_id, mask, recompute_flops, recompute_bytes, step_flops, representative, on_frontier"
                " FROM switch_costs WHERE config_hash = ?", [config_hash]).fetchall()
            stored = {(r[0], r[1], r[2]): r[3:] for r in rows}
            forward = oc.forward()[0]
            n = front.n_masks
            view = {}
            for r in con.execute(
                "SELECT kind, setting_id, mask, n_equivalent_count, kept_bytes, saved_bytes, overhead_pct FROM frontier"
                " WHERE config_hash = ? AND repo_id = (SELECT min(repo_id) FROM repos WHERE config_hash = ?)",
                [config_hash, config_hash]).fetchall():
                view.setdefault((r[0], r[1]), []).append(r[2:])
            for k, kind in enumerate(prices.kinds):
                for i, sid in enumerate(prices.setting_ids):
                    if sid in infeasible:
                        assert (kind, sid, 0) not in stored
                        continue
                    for p in range(n + 1):
                        mask = FULL if p == n else p
                        want = (front.flops[k, i, p], front.moved[k, i, p], costs.step_factor * forward[k, i],
                                FULL if p == n else int(front.representative[k, i, p]), bool(front.on_frontier[k, i, p]))
                        assert stored[(kind, sid, mask)] == want, (spec["name"], kind, sid, mask)
                    points = front.frontier_points(k, i)
                    got = sorted(view[(kind, sid)], key=lambda r: r[0])
                    assert [r[0] for r in got] == sorted(points), (spec["name"], kind, sid)
                    for mask, n_eq, kept, saved, overhead in got:
                        p = n if mask == FULL else mask
                        assert n_eq == (1 if mask == FULL else len(front.equivalents(k, i, mask)))
                        assert kept == front.kept[k, i, p] and saved == front.kept[k, i, 0] - kept
                        assert overhead == pytest.approx(100 * front.flops[k, i, p] / (3 * oc.flops[k, i].sum()), rel=1e-12)
                    checked += 1
        assert checked > 1000  # kinds x settings of the priced shipped configs
