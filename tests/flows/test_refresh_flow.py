"""The refresh flow on the shipped snapshot plus one broken config: cold, then warm.

Two flow runs (tests/support/refresh_runs.py) are shared by the tests of this module; other runs
fill a new catalogue from the cache, price a catalogue of an older grid at the new settings,
time a census out and fail a listing.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections import Counter

import duckdb
import pytest
from conftest import load_shipped, repo_id_of, shipped_config_paths
from support.refresh_runs import (
    BROKEN_REPO,
    RUN_TABLES,
    add_config,
    copy_snapshot,
    rows,
    run_refresh,
    table_differences,
)

from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.settings import load_settings
from speccat.catalogue.store.file import TABLES, open_readonly
from speccat.census import CENSUS_VERSION, config_hash
from support.hub_more import REFUSED

pytestmark = pytest.mark.slow

SHIPPED = [repo_id_of(p) for p in shipped_config_paths()]
CENSUSED = [repo for repo in SHIPPED if repo not in REFUSED]  # the rest are refused by the census, each with its reason


def shipped_hashes() -> dict[str, str]:
    return {repo_id: config_hash(load_shipped(repo_id)) for repo_id in SHIPPED}


def test_the_cold_run_completes_and_stores_every_shipped_config(snapshot_runs):
    runs = snapshot_runs
    assert runs.cold_state.is_completed()
    hashes = shipped_hashes()
    distinct = set(hashes.values())
    # Expected: every shipped repo plus the broken one listed; the broken one fails to
    # parse; each distinct shipped config is censused once, fine-tunes sharing a config
    # (DeepSeek-V3 and R1) are one.
    assert len(distinct) < len(SHIPPED)
    assert runs.cold["repos"] == len(SHIPPED) + 1
    assert runs.cold["configs"] == len(distinct)
    assert runs.cold["new_configs"] == len(distinct)
    assert runs.cold["censused"] == len(distinct) - len(REFUSED)  # a rebuild: none answered by the cache; the refused give no spec
    assert runs.cold["cached"] == 0
    refused = Counter(reason for reason, _ in REFUSED.values())
    assert runs.cold["failures"] == {"bad_json": 1, **refused}

    stored = {h for (h,) in rows(runs.db, "SELECT config_hash FROM specs WHERE census_version = ?", [CENSUS_VERSION])}
    assert stored == {hashes[repo] for repo in CENSUSED}
    repos = dict(rows(runs.db, "SELECT repo_id, config_hash FROM repos"))
    assert repos == {**hashes, BROKEN_REPO: None}


def test_the_broken_config_is_a_failures_row(snapshot_runs):
    failures = rows(snapshot_runs.after_cold, "SELECT repo_id, stage, reason, message FROM failures ORDER BY repo_id")
    assert {(r[0], r[1], r[2]) for r in failures if r[0] != BROKEN_REPO} == {(repo, "census", reason) for repo, (reason, _) in REFUSED.items()}
    repo_id, stage, reason, message = next(r for r in failures if r[0] == BROKEN_REPO)
    assert (repo_id, stage, reason) == (BROKEN_REPO, "fetch", "bad_json")
    assert "config.json" in message


def test_every_config_is_priced_for_every_setting_and_mask(snapshot_runs):
    # Expected rows per (config, kind): the grid's settings (and the overload's, for a spec with
    # routed experts) × the 2^switches masks; full recompute: one per (config, kind, setting).
    grid = load_settings()
    routed = dict(rows(snapshot_runs.db, "SELECT config_hash, coalesce(num_experts, 1) > 1 FROM specs"))
    n_masks = 2 ** len(load_records().switches)
    # A setting at which a kind of the config cannot be laid out has no prices but a row of
    # infeasible_settings (catalogue/records/layouts.yaml): the two cover the grid exactly.
    infeasible = dict(rows(snapshot_runs.db, "SELECT config_hash, count(DISTINCT setting_id) FROM infeasible_settings GROUP BY ALL"))
    per_kind = rows(
        snapshot_runs.db,
        "SELECT k.config_hash, k.kind, count(p.mask) FROM kinds k LEFT JOIN layer_prices p USING (config_hash, kind) "
        "GROUP BY ALL",
    )
    n_settings = {h: len(grid.settings) + (len(grid.overload) if routed[h] else 0) for h, _, _ in per_kind}
    assert any(routed.values()) and not all(routed.values())
    assert per_kind and all(n == (n_settings[h] - infeasible.get(h, 0)) * n_masks for h, _, n in per_kind)
    full = rows(snapshot_runs.db, "SELECT count(*) FROM full_prices")[0][0]
    assert full == sum(n_settings[h] - infeasible.get(h, 0) for h, _, _ in per_kind)
    assert 0 < len(infeasible) < len({h for h, _, _ in per_kind})  # SmolLM2's 9 heads, and others; most fit every tp


def test_the_example_queries_answer_for_every_shipped_repo(snapshot_runs):
    from speccat import sql
    from speccat.catalogue.store import present

    queries = {name: path.read_text() for name, path in sql.queries().items()}
    n_masks = 2 ** len(load_records().switches)
    with contextlib.closing(open_readonly(snapshot_runs.db)) as con:
        latest = present.run(con, queries["latest_specs"])
        assert {r[0] for r in latest.rows} == set(CENSUSED)
        fits = present.run(con, queries["fits_budget"], {"budget_gib": 10**6})
        assert {r[0] for r in fits.rows} == set(CENSUSED)  # a budget nothing exceeds
        measured = present.run(con, queries["priced_vs_measured"])
        # Every repo answers, at every point: a model whose positions end before the census's
        # 4096 tokens is measured, and priced, at its own limit (gpt2 1024, RedPajama 2048).
        assert {r[0] for r in measured.rows} == set(CENSUSED)
        column = measured.columns.index
        own = {r[0]: r[column("seq_length")] for r in measured.rows if r[column("point")] == "census"}
        short = {r: min(load_shipped(r).get(k) or 4096 for k in ("n_positions", "max_position_embeddings")) for r in CENSUSED}
        assert {r: n for r, n in own.items() if n < 4096} == {"openai-community/gpt2": 1024, "togethercomputer/RedPajama-INCITE-Chat-3B-v1": 2048}
        assert all(own[r] == min(n, 4096) for r, n in short.items())
        assert all(r[column("priced_per_token")] > 0 for r in measured.rows)
        for repo_id in CENSUSED:
            ranked = present.run(con, queries["masks_ranked"], {"repo_id": repo_id})
            n_equivalent = ranked.columns.index("n_equivalent")
            assert sum(r[n_equivalent] for r in ranked.rows) == n_masks, repo_id  # every set, in its class
        failures = present.run(con, queries["failures_by_reason"])
        census = Counter(reason for reason, _ in REFUSED.values())
        assert sorted((r[0], r[1], r[2]) for r in failures.rows) == sorted([("fetch", "bad_json", 1)] + [("census", k, n) for k, n in census.items()])


def test_a_second_run_with_nothing_changed_censuses_nothing(snapshot_runs):
    runs = snapshot_runs
    assert runs.warm_state.is_completed()
    assert runs.warm["repos"] == runs.cold["repos"]
    assert runs.warm["configs"] == runs.cold["configs"]
    assert runs.warm["stored"] == runs.cold["configs"] - len(REFUSED)  # the refused are not stored, and are answered again from the cache
    # the refused configs are not in the catalogue, so they are new again, answered by the cache
    assert (runs.warm["new_configs"], runs.warm["censused"], runs.warm["cached"]) == (len(REFUSED), 0, len(REFUSED))
    assert runs.warm["failures"] == runs.cold["failures"]


def test_the_second_run_changes_only_the_run_tables(snapshot_runs):
    runs = snapshot_runs
    content = [t for t in TABLES if t not in RUN_TABLES]
    assert table_differences(runs.after_cold, runs.db, content) == {t: (0, 0) for t in content}
    # The run tables gained the second night, and nothing of the first was lost.
    for table in RUN_TABLES:
        only_before, only_after = table_differences(runs.after_cold, runs.db, [table])[table]
        assert only_before == 0
        assert only_after == rows(runs.after_cold, f"SELECT count(*) FROM {table}")[0][0]
    run_ids = [r[0] for r in rows(runs.db, "SELECT run_id FROM runs ORDER BY started")]
    assert run_ids == [runs.cold["run_id"], runs.warm["run_id"]]


def test_the_summary_artifact_holds_the_counts(snapshot_runs):
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    warm = snapshot_runs.warm
    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["refresh-summary"]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[warm["run_id"]]),
            )
        )
    table = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
    values = {row["measure"]: row["value"] for row in table}
    assert values["repos seen"] == warm["repos"]
    assert values["distinct configs"] == warm["configs"]
    assert values["censused"] == 0
    assert values["status"] == "partial" and values["refused: bad_json"] == 1
    assert values["failing repos"] == ", ".join(sorted([BROKEN_REPO, *REFUSED]))  # the broken config and those the census refuses
    assert values["duration of the flow (s)"] == warm["seconds"]
    assert values["wall time with Prefect's start (s)"] >= warm["seconds"]


def test_a_new_catalogue_is_filled_from_the_cache_without_censusing(snapshot_runs, tmp_path):
    # Configs the cold run censused, published into a catalogue that has never seen them.
    subset = ["Qwen/Qwen3-0.6B", "deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1", "openai/gpt-oss-20b"]
    snapshot = copy_snapshot(tmp_path / "snapshot", subset)
    db = tmp_path / "from-cache.duckdb"
    state, counts = run_refresh(source="snapshot", snapshot_dir=str(snapshot), db=str(db), report=False)
    assert state.is_completed()
    assert counts["configs"] == 3  # V3 and R1 share one
    assert (counts["new_configs"], counts["cached"], counts["censused"]) == (3, 3, 0)
    hashes = sorted({config_hash(load_shipped(r)) for r in subset})
    marks = ", ".join("?" * len(hashes))
    for table in ("configs", "specs", "kinds", "stack", "measured", "layer_prices", "full_prices"):
        query = f"SELECT * FROM {table} WHERE config_hash IN ({marks}) ORDER BY ALL"
        from_cache = rows(db, query, hashes)
        assert from_cache and from_cache == rows(snapshot_runs.after_cold, query, hashes), table


def test_census_results_are_stored_compressed_and_load_back(snapshot_runs, prefect_api):
    """Each census result Prefect stored names flows/compact_pickle.py as its pickle library, holds
    zlib's stream (base64 in the record, as Prefect writes every pickle), and loads back to the
    config's analysis; stored as a plain pickle, the largest was several times the size."""
    import base64
    import zlib

    import cloudpickle
    from prefect.results import ResultRecord

    records = {p.name: p for p in prefect_api.iterdir() if p.name.startswith("speccat-analysis-")}
    cold = {config_hash(load_shipped(r)) for r in CENSUSED}
    assert cold <= {name.split("-")[2] for name in records}
    largest = max(records.values(), key=lambda p: p.stat().st_size)
    record = ResultRecord.deserialize(largest.read_bytes())
    assert record.metadata.serializer.type == "pickle" and record.metadata.serializer.picklelib == "speccat.flows.compact_pickle"
    stored = base64.decodebytes(json.loads(largest.read_bytes())["result"].encode())
    plain = zlib.decompress(stored)  # zlib's stream, not a pickle
    assert len(plain) > 5 * len(stored)
    analysis = record.result
    assert analysis.config_hash == largest.name.split("-")[2] and analysis.config_hash in cold
    assert cloudpickle.loads(plain).config_hash == analysis.config_hash


def test_a_spec_served_from_the_cache_is_named_after_this_catalogues_repo(snapshot_runs, tmp_path):
    """The cache is keyed by the config's hash, not by the repo: a config published under
    another name (a fine-tune's copy) gets the cold run's census from the cache, and this
    catalogue's spec is named after the repo it lists, not the one first censused."""
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    add_config(snapshot, "someone-else/Qwen3-0.6B-copy", json.dumps(load_shipped("Qwen/Qwen3-0.6B")))
    db = tmp_path / "copy.duckdb"
    state, counts = run_refresh(source="snapshot", snapshot_dir=str(snapshot), db=str(db), report=False)
    assert state.is_completed() and (counts["cached"], counts["censused"]) == (1, 0)
    [(name, spec)] = rows(db, "SELECT name, spec FROM specs")
    assert name == "someone-else/Qwen3-0.6B-copy" and json.loads(spec)["name"] == name
    cold = "SELECT spec FROM specs WHERE name = 'Qwen/Qwen3-0.6B'"
    # the spec is the cold run's, but for its name
    assert dict(json.loads(spec), name="Qwen/Qwen3-0.6B") == json.loads(rows(snapshot_runs.after_cold, cold)[0][0])


def test_a_catalogue_priced_under_an_older_grid_is_priced_at_the_new_settings(snapshot_runs, tmp_path):
    """A catalogue published before the grid had seq_length 32768 (its prices and settings at
    32768 removed from a copy of the cold run's): the flow prices the stored spec again, without
    a census, and the catalogue gains those prices; the others are kept as they were."""
    repo_id = "Qwen/Qwen3-0.6B"
    snapshot = copy_snapshot(tmp_path / "snapshot", [repo_id])
    db = tmp_path / "older-grid.duckdb"
    shutil.copy(snapshot_runs.after_cold, db)
    with duckdb.connect(str(db)) as con:
        newer = [r[0] for r in con.execute("SELECT setting_id FROM settings WHERE seq_length = 32768").fetchall()]
        assert newer and len(newer) < len(load_settings().stored)
        for table in ("layer_prices", "full_prices", "switch_costs", "end_prices", "loss_prices", "op_costs", "settings"):
            con.execute(f"DELETE FROM {table} WHERE list_contains(?, setting_id)", [newer])
    state, counts = run_refresh(source="snapshot", snapshot_dir=str(snapshot), db=str(db), report=False)
    assert state.is_completed()
    # the spec is stored, so it is not new; it is not priced at the whole grid, so not "stored"
    assert (counts["configs"], counts["stored"], counts["new_configs"], counts["censused"]) == (1, 0, 0, 0)
    assert counts["repriced"] + counts["cached"] == 1
    qwen = [config_hash(load_shipped(repo_id))]
    for table in ("layer_prices", "full_prices", "switch_costs"):
        query = f"SELECT * FROM {table} WHERE config_hash = ? ORDER BY ALL"
        assert rows(db, query, qwen) == rows(snapshot_runs.after_cold, query, qwen), table
    # other configs, not listed tonight, keep what they had (nothing at 32768)
    others = "SELECT count(*) FROM full_prices WHERE config_hash <> ? AND list_contains(?, setting_id)"
    assert rows(db, others, [qwen[0], newer]) == [(0,)]


def test_a_census_over_its_time_limit_becomes_a_timeout_row(prefect_api, tmp_path):
    snapshot = copy_snapshot(tmp_path / "snapshot", ["Qwen/Qwen3-0.6B", "google/gemma-2b"])
    db = tmp_path / "catalogue.duckdb"
    # rebuild: the census must really run (and be stopped), not be answered by the cache.
    state, counts = run_refresh(source="snapshot", snapshot_dir=str(snapshot), db=str(db), time_limit=0.01, rebuild=True, report=False)
    assert state.is_completed()
    assert counts["failures"] == {"timeout": 2}
    assert counts["censused"] == 0
    failures = rows(db, "SELECT repo_id, stage, reason FROM failures ORDER BY repo_id")
    assert failures == [("Qwen/Qwen3-0.6B", "census", "timeout"), ("google/gemma-2b", "census", "timeout")]
    assert rows(db, "SELECT status FROM runs") == [("partial",)]
    assert rows(db, "SELECT count(*) FROM specs") == [(0,)]


def test_a_listing_that_fails_fails_the_run_and_is_recorded(prefect_api, tmp_path):
    db = tmp_path / "catalogue.duckdb"
    state, _ = run_refresh(source="snapshot", snapshot_dir=str(tmp_path / "missing"), db=str(db))
    assert state.is_failed()
    assert rows(db, "SELECT n_repos, status, reason FROM runs") == [(0, "failed", "not_found")]
    assert rows(db, "SELECT repo_id, stage, reason FROM failures") == [("(listing)", "list", "not_found")]
