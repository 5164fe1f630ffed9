"""The view switch_classes (every class of equivalent switch sets, full recompute included, with
whether it is on the frontier) and the view frontier, its rows on the frontier, against the
table switch_costs read here: one row per class at the latest night's versions, the frontier
exactly the classes on it, no class off the frontier undominated, every switch set in one
class; and the report query classes (sql/report/classes.sql), the view's rows at one setting.

The catalogue holds two nights of shipped specs priced for real (store_runs): night 1 on an
older torch, night 2 on the current one, so switch_costs holds two versions of every spec and
only the latest may be counted."""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict

import pyarrow as pa
import pytest
from support import store_runs as runs

from speccat import sql
from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.store import present
from speccat.catalogue.store.file import open_readonly, publish

# A dense model with one kind, a dense + MoE model with two, a tied small one.
REPOS = ("meta-llama/Llama-3.1-8B-Instruct", "deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-0.6B")
OLD_TORCH = "2.12.0"
SETTINGS = (
    {"stack": "transformers", "seq_length": 4096, "tp": 2, "cp": 1},
    {"stack": "megatron", "seq_length": 8192, "tp": 4, "cp": 2},
)
KEY = ("config_hash", "census_version", "transformers_version", "torch_version", "records_version")


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    items = [runs.censused(r) for r in REPOS]
    path = tmp_path_factory.mktemp("classes") / "catalogue.duckdb"
    publish(path, runs.make_run("classes-1", items, day=1, torch=OLD_TORCH))
    publish(path, runs.make_run("classes-2", items, day=2))
    with contextlib.closing(open_readonly(path)) as con:
        yield con


def latest() -> dict[str, str]:
    """The latest night's versions, as the second run states them (not read from the catalogue)."""
    v = runs.versions()
    return {"census_version": v["census"], "transformers_version": v["transformers"], "torch_version": v["torch"], "records_version": v["records"]}


def setting_id(fields: dict) -> str:
    return runs.grid().setting(fields)["setting_id"]


def dicts(con, text: str, params: list | None = None) -> list[dict]:
    cursor = con.execute(text, params or [])
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]


def classes(con, sid: str) -> list[dict]:
    rows = dicts(con, "SELECT * FROM switch_classes WHERE setting_id = ?", [sid])
    assert rows, sid
    return rows


def costs(con, sid: str) -> list[dict]:
    """switch_costs at the setting, every version."""
    return dicts(con, "SELECT * FROM switch_costs WHERE setting_id = ?", [sid])


def repo_of() -> dict[str, str]:
    return {runs.censused(r).config_hash: r for r in REPOS}


@pytest.fixture(scope="module", params=SETTINGS, ids=lambda s: f"{s['stack']}-{s['seq_length']}-tp{s['tp']}-cp{s['cp']}")
def sid(request):
    sid = setting_id(request.param)
    assert sid in {s["setting_id"] for s in runs.grid().stored}, request.param  # a setting the grid prices
    return sid


def test_the_catalogue_holds_two_versions_of_every_spec(con, sid):
    versions = {tuple(r[k] for k in KEY) for r in costs(con, sid)}
    assert {v[3] for v in versions} == {OLD_TORCH, latest()["torch_version"]}
    assert len(versions) == 2 * len(REPOS)


def test_one_row_per_class_of_the_latest_versions(con, sid):
    want = latest()
    representatives: dict[tuple[str, str], set[int]] = defaultdict(set)
    for row in costs(con, sid):
        if all(row[k] == v for k, v in want.items()):
            representatives[(repo_of()[row["config_hash"]], row["kind"])].add(row["representative"])
    assert all(-1 in r for r in representatives.values())
    rows = classes(con, sid)
    assert {tuple(r[k] for k in want) for r in rows} == {tuple(want.values())}
    assert Counter((r["repo_id"], r["kind"]) for r in rows) == {k: len(v) for k, v in representatives.items()}
    for key, masks in representatives.items():
        assert sorted(r["mask"] for r in rows if (r["repo_id"], r["kind"]) == key) == sorted(masks)
    kinds = {(item.repo_id, g["kind"]) for item in map(runs.censused, REPOS) for g in item.spec["layers"]}
    assert set(representatives) == kinds and len(kinds) > len(REPOS)  # DeepSeek-V3's two kinds


def test_the_frontier_is_the_classes_on_it(con, sid):
    rows = classes(con, sid)
    on = {(r["repo_id"], r["kind"], r["mask"]): {k: v for k, v in r.items() if k != "on_frontier"} for r in rows if r["on_frontier"]}
    front = dicts(con, "SELECT * FROM frontier WHERE setting_id = ?", [sid])
    assert [d[0] for d in con.execute("DESCRIBE frontier").fetchall()] == [c for c in rows[0] if c != "on_frontier"]
    assert len(front) == len(on)
    assert {(r["repo_id"], r["kind"], r["mask"]): r for r in front} == on
    assert len(on) < len(rows)  # some classes are off the frontier, or this proves nothing


def test_on_frontier_is_no_class_dominating(con, sid):
    """Off the frontier: some other class keeps no more bytes at no more FLOPs and bytes moved,
    and less of one. On it: none does."""
    by_kind: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in classes(con, sid):
        by_kind[(r["repo_id"], r["kind"])].append(r)

    def point(r):
        return r["kept_bytes"], r["recompute_flops"], r["recompute_moved_bytes"]

    def dominates(q, p):
        return all(a <= b for a, b in zip(point(q), point(p))) and any(a < b for a, b in zip(point(q), point(p)))

    off = 0
    for key, rows in by_kind.items():
        for p in rows:
            dominated = any(dominates(q, p) for q in rows if q is not p)
            assert dominated == (not p["on_frontier"]), (key, p["mask"], p["switch_set"])
            off += not p["on_frontier"]
    assert off > 0


def test_every_switch_set_is_in_one_class(con, sid):
    n_masks = 1 << len(load_records().switches)
    names = dict(con.execute("SELECT mask, name FROM switch_sets").fetchall())
    assert len(names) == n_masks
    members: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    want = latest()
    for row in costs(con, sid):
        if row["mask"] >= 0 and all(row[k] == v for k, v in want.items()):
            members[(repo_of()[row["config_hash"]], row["kind"], row["representative"])].append(row["mask"])
    by_kind: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in classes(con, sid):
        by_kind[(r["repo_id"], r["kind"])].append(r)
    for key, rows in by_kind.items():
        sets = [r for r in rows if r["mask"] >= 0]
        assert sum(r["n_equivalent_count"] for r in sets) == n_masks, key
        listed = [name for r in sets for name in r["equivalents"]]
        assert sorted(listed) == sorted(names.values()), key  # each set named once, in its class
        for r in sets:
            mine = members[(*key, r["mask"])]
            assert r["n_equivalent_count"] == len(r["equivalents"]) == len(mine)
            assert r["mask"] == min(mine) and r["switch_set"] == names[r["mask"]]
            assert sorted(r["equivalents"]) == sorted(names[m] for m in mine)
        (full,) = [r for r in rows if r["mask"] == -1]
        assert (full["switch_set"], full["n_equivalent_count"], full["equivalents"], full["n_recomputed_count"]) == ("full", 1, ["full"], None)
    assert any(r["n_equivalent_count"] > 1 for rows in by_kind.values() for r in rows)  # a class of several sets


def test_the_report_query_reads_the_view_at_the_setting(con, sid):
    con.register("report_repos", pa.table({"repo_id": pa.array(sorted(REPOS), pa.string())}))  # every repo drawn (report/data.py)
    try:
        result = present.run(con, sql.load("report/classes"), {"setting_id": sid})
    finally:
        con.unregister("report_repos")
    columns = list(result.columns)
    assert columns == [
        "repo_id", "kind", "layers_count", "mask", "switch_set", "n_equivalent_count", "equivalents",
        "kept_bytes", "saved_bytes", "saved_pct", "overhead_pct", "on_frontier",
    ]  # fmt: skip
    got = [dict(zip(columns, row)) for row in result.rows]
    want = [{c: r[c] for c in columns} for r in classes(con, sid)]
    order = lambda r: (r["repo_id"], r["kind"], r["overhead_pct"], -r["kept_bytes"], r["mask"])  # noqa: E731
    assert got == sorted(want, key=order)
    assert {r["repo_id"] for r in got} == set(REPOS)
