"""The refresh flow with the Hub source, against the local stand-in of the Hub's HTTP API.

One flow run over a stand-in Hub whose repos each meet one situation: a plain repo, a 429
with Retry-After, a 503 on the download (retried by the flow's task), a gated repo, a repo
without config.json, a truncated config, and a download that keeps failing. Each ends as
the test states: stored, retried then stored, or a failures row with its reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_shipped
from support.hubstandin import Repo, StandinHub, point_huggingface_hub_at
from support.refresh_runs import rows, run_refresh

from speccat.census import config_hash

pytestmark = pytest.mark.slow

TOKEN = "hf_standin_secret_token"
RETRY_DELAYS = [0.2, 0.2]  # three tries in all
PLAIN, RATE_LIMITED, FLAKY = "Qwen/Qwen3-0.6B", "HuggingFaceTB/SmolLM2-135M-Instruct", "meta-llama/Llama-3.2-1B-Instruct"
GATED, NO_CONFIG, TRUNCATED, DOWN = "org/gated", "org/no-config", "org/truncated", "org/always-503"


def sha(i: int) -> str:
    return f"{i:040x}"


def resolve(repo: Repo) -> str:
    return f"/{repo.repo_id}/resolve/{repo.sha}/config.json"


@pytest.fixture(scope="module")
def hub_night(prefect_api, tmp_path_factory):
    """One night against the stand-in Hub, shared by the tests of this module."""
    tmp = tmp_path_factory.mktemp("hub-night")
    with pytest.MonkeyPatch.context() as monkeypatch, StandinHub() as hub:
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        monkeypatch.setenv("HF_HOME", str(tmp / "hf-home"))
        point_huggingface_hub_at(monkeypatch, hub.url, str(tmp / "hf-cache"))
        good = {}
        for i, repo_id in enumerate((PLAIN, RATE_LIMITED, FLAKY)):
            content = json.dumps(load_shipped(repo_id)).encode()
            good[repo_id] = hub.add(Repo(repo_id, sha(i + 1), files={"config.json": content}, downloads=1000 - i, likes=10 + i))
        truncated = json.dumps(load_shipped(PLAIN)).encode()[:40]
        hub.add(Repo(GATED, sha(10), files={"config.json": b"{}"}, downloads=500, gated="manual", access=403))
        hub.add(Repo(NO_CONFIG, sha(11), files={"README.md": b"no config"}, downloads=400, license=None))
        hub.add(Repo(TRUNCATED, sha(12), files={"config.json": truncated}, downloads=300))
        down = hub.add(Repo(DOWN, sha(13), files={"config.json": b"{}"}, downloads=200))
        hub.add(Repo("org/not-listed", sha(14), downloads=10**6, library_name="diffusers"))

        hub.fail("GET", resolve(good[RATE_LIMITED]), 429, {"Retry-After": "1"})
        hub.fail("GET", resolve(good[FLAKY]), 503)
        for _ in RETRY_DELAYS + [0]:
            hub.fail("GET", resolve(down), 503)

        db = tmp / "catalogue.duckdb"
        state, counts = run_refresh(source="hub", limit=7, db=str(db), retry_delays=RETRY_DELAYS, report=False)
        yield hub, db, state, counts


def test_the_night_completes_with_every_repo_accounted_for(hub_night):
    hub, db, state, counts = hub_night
    assert state.is_completed()
    assert counts["repos"] == 7
    assert counts["failures"] == {"bad_json": 1, "fetch_failed": 1, "gated": 1, "not_found": 1}
    listed = {r[0] for r in rows(db, "SELECT repo_id FROM repos")}
    assert listed == {PLAIN, RATE_LIMITED, FLAKY, GATED, NO_CONFIG, TRUNCATED, DOWN}


def test_good_repos_are_stored_pinned_to_their_listed_sha(hub_night):
    hub, db, _, _ = hub_night
    stored = dict(rows(db, "SELECT config_hash, name FROM specs"))
    for repo_id in (PLAIN, RATE_LIMITED, FLAKY):
        repo = hub.repos[repo_id]
        assert rows(db, "SELECT sha, downloads, likes, gated, license FROM repos WHERE repo_id = ?", [repo_id]) == [
            (repo.sha, repo.downloads, repo.likes, "no", "apache-2.0")
        ]
        assert config_hash(load_shipped(repo_id)) in stored
        assert all(f"/resolve/{repo.sha}/" in r.path for r in hub.requests if r.path.startswith(f"/{repo_id}/"))


def test_transient_errors_were_retried_then_stored(hub_night):
    hub, _, _, _ = hub_night
    rate_limited = hub.requests_to(resolve(hub.repos[RATE_LIMITED]), "GET")
    assert len(rate_limited) == 2 and rate_limited[1].at - rate_limited[0].at >= 1.0
    assert len(hub.requests_to(resolve(hub.repos[FLAKY]), "GET")) == 2  # the flow's task retried
    assert len(hub.requests_to(resolve(hub.repos[DOWN]), "GET")) == len(RETRY_DELAYS) + 1


def test_each_failure_is_a_row_with_its_reason(hub_night):
    _, db, _, _ = hub_night
    failures = rows(db, "SELECT repo_id, stage, reason FROM failures ORDER BY repo_id")
    assert failures == [
        (DOWN, "fetch", "fetch_failed"),
        (GATED, "fetch", "gated"),
        (NO_CONFIG, "fetch", "not_found"),
        (TRUNCATED, "fetch", "bad_json"),
    ]
    assert rows(db, "SELECT gated, config_hash FROM repos WHERE repo_id = ?", [GATED]) == [("manual", None)]


def test_the_token_is_sent_to_the_hub_and_stored_nowhere(hub_night, prefect_api):
    from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL

    hub, db, _, _ = hub_night
    # Every listing and file request carries the token (huggingface_hub may make requests
    # of its own, such as its agent-harness registry, which send none).
    ours = [r for r in hub.requests if r.path == "/api/models" or "/resolve/" in r.path]
    assert len(ours) > 7 and {r.authorization for r in ours} == {f"Bearer {TOKEN}"}
    # Everything the night wrote: the catalogue, Prefect's database (with its journal files)
    # and the persisted task results.
    prefect_db = Path(PREFECT_SERVER_DATABASE_CONNECTION_URL.value().split("///", 1)[1])
    written = [db, *prefect_db.parent.glob(prefect_db.name + "*"), *prefect_api.rglob("*")]
    files = [p for p in written if p.is_file()]
    assert db in files and prefect_db in files
    for path in files:
        assert TOKEN.encode() not in path.read_bytes(), path
