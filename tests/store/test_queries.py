"""Every sql/queries/*.sql against the two-night catalogue (store_runs), answers derived here
from the runs' own specs and pricing tables, not from the catalogue."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import subprocess
from pathlib import Path

import pytest
from support import store_runs as runs

from speccat import sql
from speccat.catalogue.store import present
from speccat.catalogue.store.file import open_readonly

TESTED = {
    "latest_specs",
    "model_bytes",
    "fits_budget",
    "masks_ranked",
    "cheapest_saving",
    "priced_vs_measured",
    "changes",
    "failures_by_reason",
    "fits_on",  # tests/flows/test_fits_on.py, on the snapshot night's table
}


@pytest.fixture(scope="module")
def con():
    with contextlib.closing(open_readonly(runs.two_night_catalogue())) as con:
        yield con


def query(con, name: str, **params):
    con.execute("RESET VARIABLE repo_id")  # variables persist per connection; start clean
    for variable in ("stack", "seq_length", "micro_batch", "tp", "cp", "switches", "budget_gib", "run_id", "model_type", "at_least_pct", "accelerator"):
        con.execute(f"RESET VARIABLE {variable}")
    result = present.run(con, present.resolve_query(name), params)
    return [dict(zip(result.columns, row)) for row in result.rows]


# --- what the catalogue should say, derived from the two runs ------------------------------


def latest_repos() -> dict[str, dict]:
    """Each repo's row from the last night that listed it; a failed fetch at a sha an earlier
    night fetched keeps that night's config (a config at a pinned sha never changes)."""
    latest: dict[str, dict] = {}
    for run in (runs.first_run(), runs.second_run()):
        for row in run.repos:
            previous = latest.get(row["repo_id"])
            config = row.get("config_hash")
            if config is None and previous and row.get("sha") and previous.get("sha") == row.get("sha"):
                config = previous["config_hash"]
            latest[row["repo_id"]] = {**row, "config_hash": config}
    return latest


def items_by_hash() -> dict[str, runs.Censused]:
    return {runs.censused(r).config_hash: runs.censused(r) for r in runs.REPOS + (runs.NEW_CONFIG, runs.ADDED)}


def setting_id(seq_length=4096, micro_batch=1, tp=1, cp=1, stack="transformers") -> str:
    wanted = {"stack": stack, "seq_length": seq_length, "micro_batch": micro_batch, "tp": tp, "cp": cp}
    (match,) = [s for s in runs.grid().settings if all(s[k] == v for k, v in wanted.items())]
    return match["setting_id"]


def layers_per_kind(spec: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for group in spec["layers"]:
        counts[group["kind"]] = counts.get(group["kind"], 0) + group["count"]
    return counts


def model_totals(item: runs.Censused, setting: str) -> dict[int | None, float]:
    """mask -> whole-model bytes (count x layer bytes over kinds); None -> full recompute."""
    counts = layers_per_kind(item.spec)
    totals: dict[int | None, float] = {}
    layer = item.prices.layer_prices.to_pylist()
    for row in layer:
        if row["setting_id"] == setting:
            totals[row["mask"]] = totals.get(row["mask"], 0.0) + counts[row["kind"]] * row["total"]
    for row in item.prices.full_prices.to_pylist():
        if row["setting_id"] == setting:
            totals[None] = totals.get(None, 0.0) + counts[row["kind"]] * row["kept"]
    return totals


def mask_of(names: list[str]) -> int:
    return sum(1 << runs.records().switches.index(n) for n in names)


def priced_repos() -> dict[str, runs.Censused]:
    items = items_by_hash()
    return {r: items[row["config_hash"]] for r, row in latest_repos().items() if row["config_hash"] in items}


# --- the queries ----------------------------------------------------------------------------


def test_every_query_file_is_tested():
    assert set(sql.queries()) == TESTED


def test_latest_specs(con):
    expected = []
    for repo_id, item in priced_repos().items():
        spec, params = item.spec, item.spec["params"]
        counts = layers_per_kind(spec)
        total = params["embedding"] + params["output"] + params["final_norm"] + sum(
            counts[k] * sum(parts.values()) for k, parts in params["kinds"].items()
        )
        expected.append((latest_repos()[repo_id]["downloads"], repo_id, spec["hidden_size"], spec["num_hidden_layers"], total))
    expected.sort(key=lambda r: (-r[0], r[1]))
    rows = query(con, "latest_specs")
    assert [(r["downloads"], r["repo_id"], r["hidden_size"], r["num_hidden_layers"], r["params"]) for r in rows] == expected
    # the failed repos have no spec, so they are not listed
    assert {r["repo_id"] for r in rows}.isdisjoint({runs.GATED, runs.BROKEN})
    deepseek = query(con, "latest_specs", model_type="deepseek_v3")
    assert [r["repo_id"] for r in deepseek] == ["deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3"]


def test_model_bytes(con):
    llama = runs.censused("meta-llama/Llama-3.1-8B-Instruct")
    rows = query(con, "model_bytes", repo_id=llama.repo_id, stack="transformers", seq_length=4096, tp=2, cp=1)
    expected = model_totals(llama, setting_id(4096, 1, 2, 1))
    assert len(rows) == 2 ** len(runs.records().switches) + 1
    assert {r["mask"]: r["total"] for r in rows} == expected
    assert [r["switch_set"] for r in rows if r["mask"] is None] == ["full"]
    for r in rows:
        if r["mask"] is not None:
            assert r["attention"] + r["ffn"] + r["norm"] == pytest.approx(r["total"], rel=1e-12)
    # without narrowing: every setting of the grid, 257 rows each
    assert len(query(con, "model_bytes", repo_id=llama.repo_id)) == len(runs.grid().settings) * len(rows)


@pytest.mark.parametrize("switches", ["all", "none", "softmax,attBMM", "full"])
def test_fits_budget(con, switches):
    setting = setting_id(8192, 1, 2, 1)
    mask = None if switches == "full" else {"all": 255, "none": 0}.get(switches)
    if mask is None and switches != "full":
        mask = mask_of(switches.split(","))
    totals = {r: model_totals(item, setting)[mask] for r, item in priced_repos().items()}
    ordered = sorted(totals.values())
    budget_gib = (ordered[2] + ordered[3]) / 2 / 2**30  # between the third and fourth smallest
    downloads = {r: latest_repos()[r]["downloads"] for r in totals}
    expected = sorted((r for r, t in totals.items() if t <= budget_gib * 2**30), key=lambda r: (-downloads[r], r))
    rows = query(con, "fits_budget", budget_gib=budget_gib, seq_length=8192, tp=2, switches=switches)
    assert [r["repo_id"] for r in rows] == expected
    assert len(expected) == 3
    assert [r["total"] for r in rows] == [totals[r] for r in expected]


def test_fits_budget_defaults_to_no_recompute_at_4096(con):
    setting = setting_id()
    totals = {r: model_totals(item, setting)[0] for r, item in priced_repos().items()}
    expected = sorted((r for r, t in totals.items() if t <= 80 * 2**30), key=lambda r: (-latest_repos()[r]["downloads"], r))
    assert [r["repo_id"] for r in query(con, "fits_budget")] == expected


def model_costs(item: runs.Censused, setting: str) -> dict[int, dict]:
    """mask -> the whole model's recompute FLOPs, bytes moved and step FLOPs (count x one layer's
    switch_costs over kinds), and the per-kind costs that make two sets equivalent."""
    counts = layers_per_kind(item.spec)
    out: dict[int, dict] = {}
    for row in sorted(item.prices.switch_costs.to_pylist(), key=lambda r: r["kind"]):
        if row["setting_id"] == setting and row["mask"] >= 0:
            m = out.setdefault(row["mask"], {"flops": 0.0, "moved": 0.0, "step": 0.0, "key": ()})
            n = counts[row["kind"]]
            m["flops"] += n * row["recompute_flops"]
            m["moved"] += n * row["recompute_bytes"]
            m["step"] += n * row["step_flops"]
            m["key"] += ((row["recompute_flops"], row["recompute_bytes"]),)
    return out


def test_masks_ranked(con):
    item = runs.censused(runs.ADDED)
    setting = setting_id(8192, 1, 4, 2)
    totals = model_totals(item, setting)
    costs = model_costs(item, setting)
    rows = query(con, "masks_ranked", repo_id=item.repo_id, seq_length=8192, tp=4, cp=2)
    masks = [m for m in totals if m is not None]
    classes: dict[tuple, list[int]] = {}
    for m in sorted(masks, key=lambda m: (bin(m).count("1"), m)):
        classes.setdefault((totals[m], costs[m]["key"]), []).append(m)
    expected = sorted(
        (members[0] for members in classes.values()),
        key=lambda m: (totals[m], costs[m]["flops"], costs[m]["moved"], bin(m).count("1"), m),
    )
    assert [r["mask"] for r in rows] == expected  # one row per distinct result, no duplicates
    assert len({tuple(r[c] for c in ("total", "recompute_flops", "recompute_moved_bytes")) for r in rows}) == len(rows)
    assert sum(r["n_equivalent"] for r in rows) == len(masks)
    assert rows[0]["rank"] == 1 and rows[-1]["rank"] <= len(rows)
    for r in rows:
        m = r["mask"]
        assert r["total"] == totals[m]
        assert r["n_equivalent"] == len(classes[(totals[m], costs[m]["key"])]) == len(r["equivalents"])
        assert r["saved"] == totals[0] - totals[m]
        assert r["pct_saved"] == round(100 * (totals[0] - totals[m]) / totals[0], 2)
        assert r["recompute_flops"] == pytest.approx(costs[m]["flops"], rel=1e-12)
        assert r["pct_overhead"] == round(100 * costs[m]["flops"] / costs[m]["step"], 2)
    # more switches recomputed never keeps more: the all-switches mask's class ranks first
    assert rows[0]["total"] == totals[255]
    # no recompute costs nothing; recomputing every switch costs some FLOPs, less than the step
    by_mask = {r["mask"]: r for r in rows}
    assert by_mask[0]["recompute_flops"] == 0 and by_mask[0]["pct_overhead"] == 0
    assert 0 < costs[255]["flops"] < costs[255]["step"]


@pytest.mark.parametrize(
    ("repo", "at_least", "seq_length", "tp"),
    [(runs.ADDED, 50, 8192, 4), (runs.ADDED, 20, 4096, 1), ("deepseek-ai/DeepSeek-V3", 30, 8192, 8), ("Qwen/Qwen3-0.6B", 60, 32768, 1)],
)
def test_cheapest_saving_is_the_cheapest_class_saving_that_much(con, repo, at_least, seq_length, tp):
    """Per kind and setting, the SQL answer is, of the class representatives and full recompute
    (frontier.py's classes, computed here from the spec) that save at least `at_least`% of mask
    0's bytes, the one of fewest estimated seconds on MI300X (cost.py, op by op), then fewest
    FLOPs, then fewest bytes kept, then the lowest mask, full recompute last; a kind and setting
    where none saves that much has no row."""
    import numpy as np

    from speccat.catalogue.records.cost import load_accelerators, load_costs, op_costs
    from speccat.catalogue.records.frontier import FULL
    from speccat.catalogue.records.pricing import price_layers
    from speccat.catalogue.records.switchcosts import spec_frontier

    item = priced_repos()[repo]
    grid = runs.grid()
    chosen = [s for s in grid.settings if s["seq_length"] == seq_length and s["tp"] == tp and s["cp"] == 1
              and s["micro_batch"] == 1 and s["stack"] == "transformers"]
    sub = dataclasses.replace(grid, settings=tuple(chosen))
    prices = price_layers(item.spec, runs.records(), sub)
    front, _ = spec_frontier(item.spec, runs.records(), sub, prices, load_costs(runs.records()))
    oc = op_costs(item.spec, runs.records(), sub, load_costs(runs.records()))
    mi300x = load_accelerators()["MI300X"]
    seconds = np.concatenate([oc.seconds(mi300x, runs.records()), oc.seconds(mi300x).sum(axis=2)[..., None]], axis=2)
    n = front.n_masks
    expected = {}
    for k, kind in enumerate(prices.kinds):
        for i, sid in enumerate(prices.setting_ids):
            points = [p for p in range(n + 1) if p == n or front.representative[k, i, p] == p]
            saving = [p for p in points if 1 - front.kept[k, i, p] / front.kept[k, i, 0] >= at_least / 100]
            if saving:
                p = min(saving, key=lambda p: (seconds[k, i, p], front.flops[k, i, p], front.kept[k, i, p], p))
                expected[(sid, kind)] = (FULL if p == n else p, front.kept[k, i, p], front.flops[k, i, p])
    rows = query(con, "cheapest_saving", repo_id=repo, at_least_pct=at_least, seq_length=seq_length, tp=tp, accelerator="MI300X")
    got = {(r["setting_id"], r["kind"]): (r["mask"], r["kept_bytes"], r["recompute_flops"]) for r in rows}
    assert got == expected
    for r in rows:
        point = front.n_masks if r["mask"] == FULL else r["mask"]
        want = seconds[prices.kinds.index(r["kind"]), prices.setting_ids.index(r["setting_id"]), point]
        assert r["accelerator"] == "MI300X" and r["recompute_s"] == pytest.approx(want, rel=1e-9)
    assert expected  # something saves that much
    for r in rows:
        assert r["saved_pct"] >= at_least


def test_priced_vs_measured(con):
    expected = {}
    for repo_id, item in priced_repos().items():
        for kind, measured in item.spec["measured"].items():
            seq = measured["seq_length"]
            setting = setting_id(seq, 1, 1, 1)
            (priced,) = [
                r["total"]
                for r in item.prices.layer_prices.to_pylist()
                if r["kind"] == kind and r["setting_id"] == setting and r["mask"] == 0
            ]
            expected[(repo_id, kind)] = (priced / seq, sum(measured["bytes_per_token"].values()))
    rows = query(con, "priced_vs_measured")
    assert {r["point"] for r in rows} == {"census"}  # these specs were censused without the points across settings
    got = {(r["repo_id"], r["kind"]): (r["priced_per_token"], r["measured_per_token"]) for r in rows}
    assert got.keys() == expected.keys()
    for key, (priced, measured) in expected.items():
        assert got[key][0] == pytest.approx(priced, rel=1e-12)
        assert got[key][1] == pytest.approx(measured, rel=1e-12)
    one = query(con, "priced_vs_measured", repo_id=runs.ADDED)
    assert {r["repo_id"] for r in one} == {runs.ADDED}


def test_changes(con):
    first = {r["repo_id"]: r for r in runs.first_run().repos}
    second = {r["repo_id"]: r for r in runs.second_run().repos}
    expected = {}
    for repo_id in first.keys() | second.keys():
        old, new = first.get(repo_id), second.get(repo_id)
        if old is None:
            expected[repo_id] = "added"
        elif new is None:
            expected[repo_id] = "removed"
        elif old.get("config_hash") != new.get("config_hash"):
            expected[repo_id] = "config"
        elif old.get("sha") != new.get("sha"):
            expected[repo_id] = "sha"
    failed = {f["repo_id"]: f["reason"] for f in runs.second_run().failures}
    for repo_id in failed.keys() - expected.keys():
        expected[repo_id] = "failing"  # no other change, but the latest night could not store it
    rows = query(con, "changes")
    assert {r["repo_id"]: r["change"] for r in rows} == expected
    assert expected[runs.GATED] == "failing"  # gated both nights
    assert {r["repo_id"]: r["failed_reason"] for r in rows if r["failed_reason"]} == {
        r: failed[r] for r in expected if r in failed
    }


def test_failures_by_reason(con):
    def grouped(run):
        out: dict[tuple, list] = {}
        for f in run.failures:
            out.setdefault((f["stage"], f["reason"]), []).append(f["repo_id"])
        return {k: sorted(v) for k, v in out.items()}

    latest = query(con, "failures_by_reason")
    assert {(r["stage"], r["reason"]): r["repo_ids"] for r in latest} == grouped(runs.second_run())
    assert all(r["repos"] == len(r["repo_ids"]) for r in latest)
    night1 = query(con, "failures_by_reason", run_id="night-1")
    assert {(r["stage"], r["reason"]): r["repo_ids"] for r in night1} == grouped(runs.first_run())


def duckdb_cli() -> Path:
    import duckdb_cli as package

    binary = Path(package.__file__).resolve().parent / "duckdb"
    assert binary.is_file(), f"duckdb-cli ships no binary at {binary}"
    return binary


def test_the_duckdb_cli_opens_the_catalogue_and_runs_a_query(con):
    """Analysts' duckdb CLI (PyPI duckdb-cli 1.5.x) reads the published file and its views."""
    version = subprocess.run([duckdb_cli(), "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("v1.5.")
    script = "SET VARIABLE budget_gib = 1000;\nSET VARIABLE switches = 'all';\n" + sql.queries()["fits_budget"].read_text()
    done = subprocess.run(
        [duckdb_cli(), "-readonly", "-csv", str(runs.two_night_catalogue())],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    got = list(csv.DictReader(io.StringIO(done.stdout)))
    want = query(con, "fits_budget", budget_gib=1000, switches="all")
    assert [(r["repo_id"], float(r["total"])) for r in got] == [(r["repo_id"], r["total"]) for r in want]
    assert len(got) == len(priced_repos())


def test_repo_fits_answers_for_every_model_at_once(con):
    """The view repo_fits: each priced repo's whole-model activations at a setting against the
    budget_gib variable, with the set's recompute FLOPs and % overhead, derived here from the
    runs' own prices and costs."""
    setting = setting_id(8192, 1, 2, 1)
    repos = priced_repos()
    totals = {r: model_totals(item, setting) for r, item in repos.items()}
    costs = {r: model_costs(item, setting) for r, item in repos.items()}
    budget_gib = sorted(t[0] for t in totals.values())[2] / 2**30  # the third smallest fits exactly
    con.execute("SET VARIABLE budget_gib = ?", [budget_gib])
    try:
        rows = con.execute(
            "SELECT repo_id, mask, activation_bytes, fits, headroom_bytes, recompute_flops, overhead_pct FROM repo_fits "
            "WHERE setting_id = ? AND mask IN (0, 89, -1)", [setting]
        ).fetchall()
    finally:
        con.execute("RESET VARIABLE budget_gib")
    got = {(r[0], r[1]): r[2:] for r in rows}
    assert set(got) == {(r, m) for r in repos for m in (0, 89, -1)}
    for (repo, mask), (activations, fits, headroom, flops, overhead) in got.items():
        total = totals[repo][None if mask == -1 else mask]
        assert activations == total and fits == (total <= budget_gib * 2**30)
        assert headroom == budget_gib * 2**30 - total
        if mask >= 0:
            assert flops == pytest.approx(costs[repo][mask]["flops"], rel=1e-12)
            assert overhead == pytest.approx(100 * costs[repo][mask]["flops"] / costs[repo][mask]["step"], rel=1e-12)
        else:  # full recompute re-runs the whole forward: a third of the step
            assert overhead == pytest.approx(100 / 3, rel=1e-12)
    assert sum(1 for (r, m), v in got.items() if m == 0 and v[1]) == 3
