"""The transformers and torch that measured a spec are part of its identity (issue #25).

A spec is keyed by (config_hash, census_version, transformers_version, torch_version), and so
is every table derived from it. A night on new libraries holds nothing of the old ones, censuses
every config again and stores the new spec beside the old; `changes` then lists, per repo and
kind, the measured and priced bytes that moved, with both nights' libraries. A night on the
same libraries carries what is stored, as before. A catalogue stored before specs recorded
their libraries is carried over, each spec taking the libraries of the night that censused it.

The versions are faked through the seams the code reads them by: NightData.versions for the
store, `speccat.flows.refresh.current_versions` for the flow. A real byte change is made by
scaling one op of one kind in the second night's census result (the flow's `analyse_stage`
answers, or the NightData's spec), as a library release that changes what autograd keeps would.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import shutil
import uuid

import duckdb
import pytest
from support import store_runs as runs
from support.refresh_runs import copy_snapshot, rows, run_refresh

from speccat.catalogue.store.file import open_readonly, publish, stored
from speccat.flows import refresh as refresh_flow
from speccat.flows.tasks import versions_key


REPO = "Qwen/Qwen3-0.6B"
GROWTH = 1.046  # what the faked release makes one op keep: 4.6% more


def grown(spec: dict, kind: str, op: str) -> dict:
    """`spec` with the bytes per token of `op` in `kind` at the census's setting grown by GROWTH."""
    out = copy.deepcopy(spec)
    out["measured"][kind]["bytes_per_token"][op] *= GROWTH
    return out


def biggest_op(spec: dict) -> tuple[str, str, float]:
    """(kind, op, bytes per token) of the op keeping the most bytes in the spec's first kind."""
    kind = sorted(spec["measured"])[0]
    op, value = max(spec["measured"][kind]["bytes_per_token"].items(), key=lambda kv: kv[1])
    return kind, op, value


def grid_ids() -> list[str]:
    """The grid's settings (the run's also hold the memory curve's, which the flow never asks about)."""
    return [s["setting_id"] for s in runs.grid().settings]


# -- the store ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory):
    """Night 1 on transformers 5.24.0, night 2 on 5.25.0 (torch 2.13.0 -> 2.13.1), the same
    config, night 2's census keeping 4.6% more in one op of one kind."""
    path = tmp_path_factory.mktemp("libraries") / "catalogue.duckdb"
    item = runs.censused(REPO)
    kind, op, before = biggest_op(item.spec)
    first = runs.make_run("night-1", [item], day=1, transformers="5.24.0", torch="2.13.0")
    second = runs.make_run("night-2", [item], day=2, transformers="5.25.0", torch="2.13.1")
    second = dataclasses.replace(second, specs={h: grown(s, kind, op) for h, s in second.specs.items()})
    publish(path, first)
    publish(path, second)
    return path, item, kind, op, before, first, second


def test_a_spec_is_stored_with_the_libraries_that_measured_it_beside_the_old_one(upgraded):
    path, item, kind, op, before, *_ = upgraded
    with contextlib.closing(open_readonly(path)) as con:
        specs = con.execute(
            "SELECT transformers_version, torch_version FROM specs WHERE config_hash = ? ORDER BY ALL", [item.config_hash]
        ).fetchall()
        measured = con.execute(
            "SELECT transformers_version, bytes_per_token FROM measured WHERE config_hash = ? AND kind = ? AND op = ?"
            " AND point = 'census' ORDER BY ALL",
            [item.config_hash, kind, op],
        ).fetchall()
        priced = con.execute(
            "SELECT transformers_version, torch_version, count(*) FROM full_prices WHERE config_hash = ? GROUP BY ALL ORDER BY ALL",
            [item.config_hash],
        ).fetchall()
    assert specs == [("5.24.0", "2.13.0"), ("5.25.0", "2.13.1")]
    assert measured == [("5.24.0", before), ("5.25.0", pytest.approx(before * GROWTH))]
    # each measurement is priced under its own key; neither is dropped
    assert [r[:2] for r in priced] == specs and priced[0][2] == priced[1][2] > 0


def test_stored_holds_a_spec_only_for_the_libraries_that_measured_it(upgraded):
    path, item, *_, first, second = upgraded
    at = lambda transformers, torch: stored(  # noqa: E731
        path, second.census_version, second.records_version, grid_ids(), libraries={"transformers": transformers, "torch": torch}
    )
    for libraries in (("5.24.0", "2.13.0"), ("5.25.0", "2.13.1")):
        held = at(*libraries)
        assert held.specs == held.priced == frozenset({item.config_hash})
    # a new transformers, or a new torch alone, holds nothing: the flow censuses again
    for libraries in (("5.26.0", "2.13.1"), ("5.25.0", "2.14.0")):
        held = at(*libraries)
        assert held.specs == held.priced == frozenset()


def test_changes_reports_the_bytes_a_library_upgrade_changed_per_kind(upgraded):
    path, item, kind, op, before, *_ = upgraded
    with contextlib.closing(open_readonly(path)) as con:
        cursor = con.execute("SELECT * FROM changes ORDER BY change, kind NULLS FIRST")
        names = [d[0] for d in cursor.description]
        rows_ = [dict(zip(names, r)) for r in cursor.fetchall()]
        measured = {
            k: v
            for k, v in con.execute(
                "SELECT transformers_version, sum(bytes_per_token) FILTER (WHERE op <> 'cached') FROM measured"
                " WHERE config_hash = ? AND kind = ? AND point = 'census' GROUP BY ALL",
                [item.config_hash, kind],
            ).fetchall()
        }
    by_change = {}
    for row in rows_:
        by_change.setdefault(row["change"], []).append(row)
    assert set(by_change) == {"bytes", "repriced"}
    (repriced,) = by_change["repriced"]
    assert repriced["repo_id"] == REPO and repriced["kind"] is None
    assert repriced["repriced_because"] == "transformers 5.24.0 -> 5.25.0; torch 2.13.0 -> 2.13.1"
    # only the kind whose bytes moved has a row: the others kept the same bytes
    (row,) = by_change["bytes"]
    assert (row["repo_id"], row["kind"]) == (REPO, kind)
    assert (row["old_transformers_version"], row["new_transformers_version"]) == ("5.24.0", "5.25.0")
    assert (row["old_torch_version"], row["new_torch_version"]) == ("2.13.0", "2.13.1")
    assert row["old_measured_per_token"] == pytest.approx(measured["5.24.0"])
    assert row["new_measured_per_token"] == pytest.approx(measured["5.25.0"])
    growth = before * (GROWTH - 1)
    assert row["new_measured_per_token"] - row["old_measured_per_token"] == pytest.approx(growth)
    assert row["measured_change_pct"] == pytest.approx(100 * growth / measured["5.24.0"])
    # the records price the spec's dimensions, which the release did not change
    assert row["old_priced_per_token"] == row["new_priced_per_token"] > 0 and row["priced_change_pct"] == 0
    assert (row["old_config_hash"], row["new_config_hash"]) == (item.config_hash, item.config_hash)


def test_the_latest_views_read_the_latest_nights_libraries(upgraded):
    path, item, kind, op, before, *_ = upgraded
    with contextlib.closing(open_readonly(path)) as con:
        latest = con.execute("SELECT transformers_version, torch_version FROM latest_specs WHERE repo_id = ?", [REPO]).fetchall()
        pvm = con.execute(
            "SELECT DISTINCT transformers_version FROM priced_vs_measured WHERE config_hash = ?", [item.config_hash]
        ).fetchall()
    assert latest == [("5.25.0", "2.13.1")]
    assert sorted(pvm) == [("5.24.0",), ("5.25.0",)]  # it covers every measurement stored


def test_two_nights_on_the_same_libraries_keep_one_spec_and_report_no_bytes(tmp_path):
    path = tmp_path / "catalogue.duckdb"
    item = runs.censused(REPO)
    first = runs.make_run("night-1", [item], day=1, transformers="5.25.0", torch="2.13.1")
    second = runs.make_run("night-2", [item], day=2, new=(), transformers="5.25.0", torch="2.13.1")
    publish(path, first)
    held = stored(path, first.census_version, first.records_version, grid_ids(), libraries={"transformers": "5.25.0", "torch": "2.13.1"})
    assert held.specs == held.priced == frozenset({item.config_hash})  # the flow carries it, no census
    publish(path, second)  # a night that carries the spec stores nothing new
    with contextlib.closing(open_readonly(path)) as con:
        assert con.execute("SELECT count(*) FROM specs").fetchone()[0] == 1
        assert con.execute("SELECT count(*) FROM changes").fetchone()[0] == 0


def test_a_catalogue_stored_before_specs_had_libraries_is_carried_with_each_nights(tmp_path):
    """The old schema's rows gain the libraries of the night that first listed their config at
    their census version; nothing stored is lost."""
    path = tmp_path / "catalogue.duckdb"
    item = runs.censused(REPO)
    first = runs.make_run("night-1", [item], day=1, transformers="5.24.0", torch="2.13.0")
    publish(path, first)
    spec_tables = ("specs", "kinds", "stack", "measured", "layer_prices", "full_prices", "switch_costs",
                   "infeasible_settings", "point_prices", "end_prices", "loss_prices", "op_costs")  # fmt: skip
    with contextlib.closing(duckdb.connect(str(path))) as con:
        before = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in spec_tables}
        for table in spec_tables:  # the schema before this change: no library columns
            con.execute(f"CREATE TABLE old_{table} AS SELECT * EXCLUDE (transformers_version, torch_version) FROM {table}")
            con.execute(f"DROP TABLE {table}")
            con.execute(f"ALTER TABLE old_{table} RENAME TO {table}")
    held = stored(path, first.census_version, first.records_version, grid_ids(), libraries={"transformers": "5.24.0", "torch": "2.13.0"})
    assert held.specs == frozenset()  # the old file cannot say: the flow censuses again
    # the same library's night: the re-censused spec lands on the carried row, unchanged
    second = runs.make_run("night-2", [item], day=2, transformers="5.24.0", torch="2.13.0")
    assert publish(path, second).rebuilt
    with contextlib.closing(open_readonly(path)) as con:
        after = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in spec_tables}
        libraries = con.execute("SELECT DISTINCT transformers_version, torch_version FROM measured").fetchall()
    assert after == before and libraries == [("5.24.0", "2.13.0")]


# -- the flow -------------------------------------------------------------------------------


def fake_libraries(monkeypatch, transformers: str, torch: str) -> None:
    """The flow reads the libraries' versions through current_versions(): fake them."""
    real = refresh_flow.current_versions

    def versions():
        return {**real(), "transformers": transformers, "torch": torch}

    monkeypatch.setattr(refresh_flow, "current_versions", versions)


def grow_census(monkeypatch) -> None:
    """The census stage's answers with one op of one kind keeping GROWTH times its bytes."""
    real = refresh_flow.analyse_stage

    def stage(night, jobs, *args, **kwargs):
        real(night, jobs, *args, **kwargs)
        for config_hash, analysis in list(night.analyses.items()):
            spec = json.loads(analysis.spec)
            kind, op, _ = biggest_op(spec)
            night.analyses[config_hash] = dataclasses.replace(analysis, spec=json.dumps(grown(spec, kind, op)))

    monkeypatch.setattr(refresh_flow, "analyse_stage", stage)


@pytest.mark.slow
def test_a_night_on_new_libraries_censuses_again_and_changes_shows_the_bytes(prefect_api, tmp_path, monkeypatch):
    snapshot = copy_snapshot(tmp_path / "snapshot", [REPO])
    db = tmp_path / "catalogue.duckdb"
    tag = uuid.uuid4().hex[:8]  # versions no earlier run cached a result under
    old, new = (f"5.24.0+{tag}", "2.13.0"), (f"5.25.0+{tag}", "2.13.1")

    fake_libraries(monkeypatch, *old)
    state, first = run_refresh(source="snapshot", snapshot_dir=str(snapshot), db=str(db), report=False)
    assert state.is_completed() and (first["censused"], first["cached"]) == (1, 0)

    # the same libraries: carried, neither censused nor asked of the cache
    shutil.copy(db, tmp_path / "after-first.duckdb")
    state, same = run_refresh(source="snapshot", snapshot_dir=str(snapshot), db=str(db), report=False)
    assert state.is_completed() and (same["stored"], same["censused"], same["cached"]) == (1, 0, 0)

    # new libraries: the config is censused again (the cache key names them too)
    fake_libraries(monkeypatch, *new)
    grow_census(monkeypatch)
    state, second = run_refresh(source="snapshot", snapshot_dir=str(snapshot), db=str(db), report=False)
    assert state.is_completed()
    assert (second["stored"], second["new_configs"], second["censused"], second["cached"]) == (0, 1, 1, 0)

    assert rows(db, "SELECT transformers_version, torch_version FROM specs ORDER BY ALL") == [old, new]
    changed = rows(
        db,
        "SELECT change, repo_id, kind, old_transformers_version, new_transformers_version, old_torch_version,"
        " new_torch_version, new_measured_per_token > old_measured_per_token, round(measured_change_pct, 6) > 0,"
        " priced_change_pct FROM changes WHERE change = 'bytes'",
    )
    assert len(changed) == 1
    assert changed[0][:7] == ("bytes", REPO, changed[0][2], *(v for pair in zip(old, new) for v in pair))
    assert changed[0][7:] == (True, True, 0.0)


def test_the_cache_key_names_both_libraries():
    versions = runs.versions()
    key = versions_key(versions, 4096)
    assert versions_key({**versions, "transformers": "5.26.0"}, 4096) != key
    assert versions_key({**versions, "torch": "2.14.0"}, 4096) != key
    assert versions_key(dict(versions), 4096) == key
