"""Hub faults through the local stand-in of the Hub (tests/support/hubstandin.py), and the Hub token.

Three nights against one catalogue, with the real huggingface_hub client and the flow's own
retries (tests/flows/test_refresh_hub.py covers 429 with Retry-After, 503 and gated repos):

1. clean: three repos stored, a gated one a failures row;
2. faults: the listing stalls past the flow's listing timeout (the flow gives up and tries
   again); one repo's metadata request is reset (TCP RST) once; another's is rate limited (429
   with Retry-After) and then its download stalls past huggingface_hub's download timeout (it
   resumes); a third repo's download is reset, answered 502, reset: one per try of the flow (a
   `fetch_failed` row);
3. the same Hub without faults.

After the faulty night the catalogue answers as before (the repo that could not be fetched keeps
the config its pinned sha had), and the rerun ends with the clean night's content. The token
(HF_TOKEN) reaches the Hub on every request and appears in no log record, artifact, catalogue,
result file or Prefect database written through the three nights.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import load_shipped
from support.hubstandin import Repo, StandinHub, point_huggingface_hub_at
from support.refresh_runs import RUN_TABLES, rows, run_refresh, table_differences
from support.reliability_runs import answers

from speccat.catalogue.store.file import TABLES

pytestmark = pytest.mark.slow

TOKEN = "hf_reliability_secret_token_8c1f"
RETRY_DELAYS = [0.2, 0.2]  # three tries in all
TIMEOUT_S = 1  # huggingface_hub's metadata and download timeouts, and the flow's listing timeout
STALL_S = 3
P1, P2, P3 = "Qwen/Qwen3-0.6B", "HuggingFaceTB/SmolLM2-135M-Instruct", "meta-llama/Llama-3.2-1B-Instruct"
GATED = "org/gated"
# P1's config with values in keys its config_hash ignores that transformers refuses (a dtype that
# is no dtype, a pad id beyond the vocabulary): the same hash, few downloads, a name that sorts first.
SQUATTER = "Aaa-squatter/qwen3-0.6b"


def served(repo_id: str) -> dict:
    """The config the stand-in serves: P1's with 27 layers (not 28), a config_hash no other test
    censuses, so the squatter's census is not answered from the session's cache."""
    config = load_shipped(repo_id)
    return dict(config, num_hidden_layers=27) if repo_id == P1 else config
CONTENT = tuple(t for t in TABLES if t not in RUN_TABLES)


def resolve(repo: Repo) -> str:
    return f"/{repo.repo_id}/resolve/{repo.sha}/config.json"


class Records(logging.Handler):
    """Every log record emitted while attached, formatted (with tracebacks)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@dataclass
class HubNights:
    hub: StandinHub
    db: Path
    clean: Path  # copies of the catalogue after nights 1 and 2
    faulty: Path
    states: dict[str, Any]
    counts: dict[str, dict]
    log_lines: list[str]
    tmp: Path


@pytest.fixture(scope="module")
def nights(prefect_api, tmp_path_factory):
    from huggingface_hub import constants

    from speccat.flows import tasks

    tmp = tmp_path_factory.mktemp("hub-faults")
    db = tmp / "catalogue.duckdb"
    states, counts = {}, {}
    records = Records()
    loggers = [logging.getLogger(), logging.getLogger("prefect"), logging.getLogger("huggingface_hub")]
    with pytest.MonkeyPatch.context() as monkeypatch, StandinHub() as hub:
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        monkeypatch.setenv("HF_HOME", str(tmp / "hf-home"))
        monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", TIMEOUT_S)
        monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", TIMEOUT_S)
        monkeypatch.setattr(tasks, "LIST_TIMEOUT_S", TIMEOUT_S)
        repos = {}
        for i, repo_id in enumerate((P1, P2, P3)):
            content = json.dumps(served(repo_id)).encode()
            repos[repo_id] = hub.add(Repo(repo_id, f"{i + 1:040x}", files={"config.json": content}, downloads=1000 - i))
        hub.add(Repo(GATED, f"{9:040x}", files={"config.json": b"{}"}, downloads=10, gated="manual", access=403))
        squatted = dict(served(P1), dtype="load", pad_token_id=10**6)
        hub.add(Repo(SQUATTER, f"{8:040x}", files={"config.json": json.dumps(squatted).encode()}, downloads=1))

        def night(name: str) -> None:
            # A cache of its own each night (a fresh worker): pinned files already cached cost
            # no request, and the faults are in the requests.
            point_huggingface_hub_at(monkeypatch, hub.url, str(tmp / f"hf-cache-{name}"))
            states[name], counts[name] = run_refresh(source="hub", limit=10, db=str(db), retry_delays=RETRY_DELAYS)

        for logger in loggers:
            logger.addHandler(records)
        try:
            night("clean")
            shutil.copy(db, tmp / "clean.duckdb")

            hub.stall("GET", "/api/models", STALL_S)  # past the flow's listing timeout
            hub.reset("HEAD", resolve(repos[P1]))
            hub.fail("HEAD", resolve(repos[P2]), 429, {"Retry-After": "1"})
            hub.stall("GET", resolve(repos[P2]), STALL_S)  # past the download timeout
            hub.reset("GET", resolve(repos[P3]))
            hub.fail("GET", resolve(repos[P3]), 502)
            hub.reset("GET", resolve(repos[P3]))
            hub.requests.clear()
            night("faulty")
            shutil.copy(db, tmp / "faulty.duckdb")

            night("rerun")
        finally:
            for logger in loggers:
                logger.removeHandler(records)
        yield HubNights(hub, db, tmp / "clean.duckdb", tmp / "faulty.duckdb", states, counts, records.lines, tmp)


def test_the_clean_night_stores_the_three_repos(nights):
    assert nights.states["clean"].is_completed()
    assert nights.counts["clean"]["failures"] == {"gated": 1}
    assert {r for (r,) in rows(nights.clean, "SELECT name FROM specs")} == {P1, P2, P3}


def test_a_repo_sharing_a_hash_cannot_refuse_the_census_of_a_more_downloaded_one(nights):
    from speccat.census import config_hash

    shared = config_hash(served(P1))
    assert config_hash(json.loads(nights.hub.repos[SQUATTER].files["config.json"])) == shared
    # Censused from P1 (1000 downloads), not from the squatter (1, first by name), whose
    # dtype and pad id transformers refuses: both repos get the spec.
    assert rows(nights.clean, "SELECT name FROM specs WHERE config_hash = ?", [shared]) == [(P1,)]
    assert dict(rows(nights.clean, "SELECT repo_id, config_hash FROM repos WHERE repo_id IN (?, ?)", [P1, SQUATTER])) == {
        P1: shared,
        SQUATTER: shared,
    }
    assert json.loads(rows(nights.clean, "SELECT config::VARCHAR FROM configs WHERE config_hash = ?", [shared])[0][0]) == served(P1)


def test_the_faulty_night_completes_with_the_one_repo_it_could_not_fetch_as_a_row(nights):
    assert nights.states["faulty"].is_completed()
    counts = nights.counts["faulty"]
    assert counts["repos"] == 5
    assert counts["failures"] == {"fetch_failed": 1, "gated": 1}
    run_id = counts["run_id"]
    failures = rows(nights.faulty, "SELECT repo_id, stage, reason, message FROM failures WHERE run_id = ? ORDER BY repo_id", [run_id])
    assert [f[:3] for f in failures] == [(P3, "fetch", "fetch_failed"), (GATED, "fetch", "gated")]
    assert "reset" in failures[0][3].lower()  # the last try's error


def task_run_counts(flow_run_id: str) -> dict[str, int]:
    """How many times each task of a flow run ran (Prefect's retries run the same task run again)."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return {run.name.rsplit("-", 1)[0] if run.name.startswith("list-repos") else run.name: run.run_count for run in task_runs}


def test_the_flow_gave_up_on_the_stalled_listing_and_retried_what_failed(nights):
    ran = task_run_counts(nights.counts["faulty"]["run_id"])
    assert ran["list-repos"] == 2  # stalled past its timeout, then answered
    assert ran[f"fetch {P1}"] == 2  # reset once
    assert ran[f"fetch {P2}"] == 1  # huggingface_hub asked again after the 429 and resumed the stalled download
    assert ran[f"fetch {P3}"] == len(RETRY_DELAYS) + 1  # reset, 502, reset
    assert ran[f"fetch {GATED}"] == 1  # not transient: not retried


def test_each_fault_was_met(nights):
    hub = nights.hub
    # Requests of the faulty night and its rerun (the log was cleared before the faulty night).
    listing = hub.requests_to("/api/models", "GET")
    assert len(listing) >= 2  # stalled, then answered (and the pages after)
    assert len(hub.requests_to(resolve(hub.repos[P1]), "HEAD")) >= 2  # reset, then answered
    assert len(hub.requests_to(resolve(hub.repos[P2]), "HEAD")) >= 2  # rate limited, then asked again
    assert len(hub.requests_to(resolve(hub.repos[P2]), "GET")) >= 2  # stalled, then resumed
    # P3: reset on each of the flow's tries in the faulty night, then answered in the rerun.
    assert len(hub.requests_to(resolve(hub.repos[P3]), "GET")) == len(RETRY_DELAYS) + 2


def test_after_the_faulty_night_the_catalogue_answers_as_before(nights):
    # P3 could not be fetched, but its pinned sha is the one whose config is stored: it stays.
    assert answers(nights.faulty, (P1, P2, P3)) == answers(nights.clean, (P1, P2, P3))
    assert table_differences(nights.clean, nights.faulty, CONTENT) == {t: (0, 0) for t in CONTENT}


def test_the_rerun_ends_with_the_clean_nights_content(nights):
    assert nights.states["rerun"].is_completed()
    assert nights.counts["rerun"]["failures"] == {"gated": 1}
    assert table_differences(nights.clean, nights.db, CONTENT) == {t: (0, 0) for t in CONTENT}
    assert answers(nights.db, (P1, P2, P3)) == answers(nights.clean, (P1, P2, P3))


def test_each_night_writes_its_report_beside_the_catalogue(nights):
    # catalogue.duckdb -> catalogue-report/ (docs/report.md), written anew by each of the three nights
    folder = nights.db.with_name("catalogue-report")
    assert [nights.counts[name]["report"] for name in ("clean", "faulty", "rerun")] == [str(folder)] * 3
    assert (folder / "index.html").is_file()


def test_the_token_is_sent_to_the_hub_and_written_nowhere(nights, prefect_api):
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler
    from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL

    ours = [r for r in nights.hub.requests if r.path == "/api/models" or "/resolve/" in r.path]
    assert ours and {r.authorization for r in ours} == {f"Bearer {TOKEN}"}

    # Log records emitted in this process during the nights (the faults made warnings and errors).
    assert any("Retrying" in line or "reset" in line.lower() for line in nights.log_lines)
    leaked = [line for line in nights.log_lines if TOKEN in line]
    assert leaked == []

    # What the Prefect API holds for the three flow runs: their logs and artifacts.
    APILogHandler().flush()
    run_ids = [nights.counts[n]["run_id"] for n in ("clean", "faulty", "rerun")]
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=run_ids)))
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=run_ids)))
        flow_runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=run_ids)))
    # each night's summary and the link to its report
    assert sorted(a.key for a in artifacts) == ["refresh-report"] * 3 + ["refresh-summary"] * 3 and len(flow_runs) == 3
    for text in [log.message for log in logs] + [json.dumps(a.data) + str(a.description) for a in artifacts]:
        assert TOKEN not in text
    for flow_run in flow_runs:
        assert TOKEN not in flow_run.model_dump_json()

    # Every file the nights wrote: the catalogue and its copies, Prefect's database, the
    # persisted task results, the Hugging Face cache.
    prefect_db = Path(PREFECT_SERVER_DATABASE_CONNECTION_URL.value().split("///", 1)[1])
    written = [*nights.tmp.rglob("*"), *prefect_db.parent.glob(prefect_db.name + "*"), *prefect_api.rglob("*")]
    files = [p for p in written if p.is_file()]
    assert nights.db in files and prefect_db in files
    for path in files:
        with contextlib.suppress(FileNotFoundError):  # a journal file gone since it was listed
            assert TOKEN.encode() not in path.read_bytes(), path
