"""A scope-all night publishes what changed (issue 30, item 3; docs/refresh.md "Publishing the
whole Hub"): two nights over one synthetic Hub, each published into a DuckLake and, side by side,
into the single DuckDB file. The first lists, fetches and prices every repo; before the later one,
1% of the repos get a new commit at the config they had (the most common change on the Hub: a
fine-tune retrained). The lake's later publish writes what those rows take, a few percent of the
first's bytes; the single file is written whole again (a copy renamed over the old one). Both
targets then answer alike.
"""

from __future__ import annotations

import shutil

import pytest
from conftest import SNAPSHOT
from support.hubstandin import StandinHub, point_huggingface_hub_at
from support.refresh_runs import rows, run_refresh
from support.synthetic_hub import change, synthetic_repos
from support.written_bytes import files_of, written

from speccat.flows.targets import LakeTarget

pytestmark = pytest.mark.slow

SMALL = ("HuggingFaceTB/SmolLM2-135M-Instruct", "Qwen/Qwen3-0.6B", "openai-community/gpt2")
REPOS = 200
CHANGED = REPOS // 100
# What the later night may write, against the first night into the same target.
INCREMENTAL = 0.05
LAST_SNAPSHOT = "SELECT max(snapshot_id) FROM ducklake_snapshots('lake')"
# The tables whose rows a night of retrained repos changes: its run, its crawl, the listed repos'
# history and latest rows, and the lake's publish counter.
CHANGED_TABLES = {"runs", "crawls", "repo_history", "repos", "lake_epoch"}


@pytest.fixture(scope="module")
def nights(prefect_api, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub-publish")
    snapshot = tmp / "snapshot"
    for repo_id in SMALL:
        shutil.copytree(SNAPSHOT / repo_id.replace("/", "__", 1), snapshot / repo_id.replace("/", "__", 1))
    repos, _ = synthetic_repos(REPOS, len(SMALL), snapshot=snapshot)
    lake = LakeTarget(f"sqlite:{tmp / 'lake.sqlite'}", str(tmp / "lake") + "/")
    db = tmp / "catalogue.duckdb"
    targets = {
        "lake": ({"lake": lake.catalog, "lake_data": lake.data_path}, [tmp / "lake.sqlite", tmp / "lake"]),
        "file": ({"db": str(db)}, [db]),
    }
    out = {"lake": lake, "db": db}
    with pytest.MonkeyPatch.context() as monkeypatch, StandinHub(repos, page_size=50) as hub:
        monkeypatch.setenv("HF_TOKEN", "hf_publish_token")
        point_huggingface_hub_at(monkeypatch, hub.url, str(tmp / "hf-cache"))

        def night(name: str) -> None:
            for target, (options, watched) in targets.items():
                before = files_of(*watched)
                state, counts = run_refresh(source="hub", scope="all", retry_delays=[0.1], report=False, **options)
                out[name, target] = (state, counts, written(before, files_of(*watched)))

        night("first")
        with lake.open_readonly() as con:
            out["first_snapshot"] = con.execute(LAST_SNAPSHOT).fetchone()[0]
        retrained = sorted(hub.repos)[:: REPOS // CHANGED][:CHANGED]
        change(hub, retrained, REPOS + 1)
        out["retrained"] = retrained
        night("later")
        yield out


def test_the_later_night_lists_and_fetches_only_the_retrained_repos(nights):
    for target in ("lake", "file"):
        state, counts, _ = nights["later", target]
        assert state.is_completed(), target
        crawl = counts["crawl"]
        # listed down to the first night's newest change, which is listed again and found unchanged
        assert (crawl["listing"], crawl["n_fetched"], crawl["n_listed"]) == ("changes", CHANGED, CHANGED + 1), target
        assert counts["censused"] == 0 and counts["new_configs"] == 0, target


def test_the_lake_writes_only_the_rows_that_changed(nights):
    first = nights["first_snapshot"]
    with nights["lake"].open_readonly() as con:
        later = con.execute(f"SELECT changes FROM ducklake_snapshots('lake') WHERE snapshot_id > {first}").fetchall()
        names = dict(con.execute("SELECT table_id::VARCHAR, table_name FROM ducklake_table_info('lake')").fetchall())
        last = con.execute(LAST_SNAPSHOT).fetchone()[0]

        def changed_rows(table: str, how: str) -> int:
            query = f"SELECT count(*) FROM ducklake_table_{how}('lake', 'main', '{table}', {first + 1}, {last})"
            return con.execute(query).fetchone()[0]

        rows_changed = {t: (changed_rows(t, "insertions"), changed_rows(t, "deletions")) for t in ("repo_history", "repos")}
    touched = {names[t] for (changes,) in later for key in ("tables_inserted_into", "tables_deleted_from") for t in changes.get(key, ())}
    assert touched == CHANGED_TABLES
    # no view is created again (nothing in their definitions changed), no price or spec is written
    assert not any("views_created" in changes for (changes,) in later)
    # the history gains the retrained repos and the one listed again; `repos` replaces the retrained
    assert rows_changed == {"repo_history": (CHANGED + 1, 0), "repos": (CHANGED, CHANGED)}


def test_the_lake_writes_a_few_percent_of_the_first_nights_bytes_and_the_file_writes_all(nights):
    lake_first, lake_later = nights["first", "lake"][2], nights["later", "lake"][2]
    file_first, file_later = nights["first", "file"][2], nights["later", "file"][2]
    assert lake_first > 0 and file_first > 0
    assert lake_later <= INCREMENTAL * lake_first, (lake_later, lake_first)
    # the single file is a whole new copy every night: at least what the first night wrote
    assert file_later >= file_first, (file_later, file_first)


def test_the_lake_and_the_file_hold_the_same_repos_and_history(nights):
    with nights["lake"].open_readonly() as con:
        lake_repos = con.execute("SELECT repo_id, sha, config_hash FROM repos ORDER BY repo_id").fetchall()
        lake_history = con.execute("SELECT count(*), count(DISTINCT run_id) FROM repo_history").fetchall()
        lake_runs = con.execute("SELECT count(*) FROM runs").fetchall()
    file_repos = rows(nights["db"], "SELECT repo_id, sha, config_hash FROM repos ORDER BY repo_id")
    assert len(lake_repos) == REPOS and lake_repos == file_repos
    # every night stays in the history: the first's every repo, the later's retrained ones and the
    # one listed again
    assert lake_history == rows(nights["db"], "SELECT count(*), count(DISTINCT run_id) FROM repo_history") == [(REPOS + CHANGED + 1, 2)]
    assert lake_runs == [(2,)]
    # a retrained repo's row holds its new sha, and its first sha stays in the history
    sha_now = {repo_id: sha for repo_id, sha, _ in lake_repos}
    history = "SELECT repo_id, list(sha ORDER BY started) FROM repo_history JOIN runs USING (run_id) WHERE list_contains(?, repo_id) GROUP BY repo_id"
    shas = dict(rows(nights["db"], history, [nights["retrained"]]))
    assert sorted(shas) == sorted(nights["retrained"])
    for repo_id, (first, later) in shas.items():
        assert first != later and sha_now[repo_id] == later
