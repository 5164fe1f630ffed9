"""The fetch stage fetches a batch of repos per Prefect task (flows/refresh.py fetch_batches,
flows/tasks.py fetch_configs), against the Hub stand-in (tests/support/hubstandin.py).

A batch with a transient failure is tried again whole: the configs it fetched already come from
the Hugging Face cache without a request, a refused repo is asked again, and when the retries
run out the last try's answers are kept, one failures row only for the repo that kept failing.
"""

from __future__ import annotations

import json

import pytest
from conftest import load_shipped
from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner
from support.hubstandin import Repo, StandinHub, point_huggingface_hub_at

from speccat.flows import refresh
from speccat.flows.hub import Listing, make_source
from speccat.flows.refresh import Night, fetch_batches, fetch_stage

RETRY_DELAYS = [0.1, 0.1]  # three tries in all
OK, RESET_ONCE, GATED, FAILING = "org/ok", "org/reset-once", "org/gated", "org/failing"


def listings(n: int) -> list[Listing]:
    return [Listing(f"org/repo-{i}", "hub") for i in range(n)]


@pytest.mark.parametrize(
    ("n", "sizes"),
    [
        (5, [1] * 5),  # fewer repos than 8 threads x 4 batches: one repo a task
        (100, [4] * 25),  # ceil(100 / 32) = 4
        (2_000, [63] * 31 + [47]),  # ceil(2000 / 32) = 63; 31 x 63 = 1953
        (10_000, [100] * 100),  # ceil(10000 / 32) = 313, bounded by 100
    ],
)
def test_batches_keep_the_order_and_bound_their_size(n, sizes):
    given = listings(n)
    batches = fetch_batches(given)
    assert [len(b) for b in batches] == sizes
    assert [l for b in batches for l in b] == given


@flow(task_runner=ThreadPoolTaskRunner(max_workers=2))
def fetch_night(repo_ids: list[str]) -> tuple[Night, list]:
    source = make_source("hub")
    listed = {l.repo_id: l for l in source.list(None)}
    night = Night()
    pending = fetch_stage(night, source, RETRY_DELAYS, [listed[r] for r in repo_ids])
    return night, pending


def task_runs(flow_run_id) -> dict[str, int]:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return {run.name: run.run_count for run in runs}


def test_a_batch_with_a_transient_failure_is_tried_again_whole_and_keeps_its_last_answers(prefect_api, tmp_path, monkeypatch):
    monkeypatch.setattr(refresh, "BATCHES_PER_THREAD", 1)
    monkeypatch.setattr(refresh, "FETCH_THREADS", 1)  # the four repos in one batch
    config = json.dumps(load_shipped("Qwen/Qwen3-0.6B")).encode()
    with StandinHub() as hub:
        point_huggingface_hub_at(monkeypatch, hub.url, str(tmp_path / "hf-cache"))
        repos = {
            OK: hub.add(Repo(OK, f"{1:040x}", files={"config.json": config}, downloads=40)),
            RESET_ONCE: hub.add(Repo(RESET_ONCE, f"{2:040x}", files={"config.json": config}, downloads=30)),
            GATED: hub.add(Repo(GATED, f"{3:040x}", files={"config.json": b"{}"}, downloads=20, gated="manual", access=403)),
            FAILING: hub.add(Repo(FAILING, f"{4:040x}", files={"config.json": config}, downloads=10)),
        }

        def path(repo_id: str) -> str:
            return f"/{repo_id}/resolve/{repos[repo_id].sha}/config.json"

        hub.reset("GET", path(RESET_ONCE))
        for _ in range(len(RETRY_DELAYS) + 1):
            hub.fail("GET", path(FAILING), 502)
        state = fetch_night([OK, RESET_ONCE, GATED, FAILING], return_state=True)
        night, pending = state.result()

        assert task_runs(state.state_details.flow_run_id) == {f"fetch {OK} and 3 more": len(RETRY_DELAYS) + 1}
        assert sorted(night.fetched) == [OK, RESET_ONCE]
        assert night.fetched[OK].config_hash == night.fetched[RESET_ONCE].config_hash
        assert {r: (f.stage, f.reason) for r, f in night.failures.items()} == {GATED: ("fetch", "gated"), FAILING: ("fetch", "fetch_failed")}
        assert "502" in night.failures[FAILING].message  # the last try's error
        assert pending == []
        # what each try asked the Hub: the fetched configs once, from the cache after that
        assert len(hub.requests_to(path(OK), "GET")) == 1
        assert len(hub.requests_to(path(RESET_ONCE), "GET")) == 2  # reset, then answered
        assert len(hub.requests_to(path(FAILING), "GET")) == len(RETRY_DELAYS) + 1
        assert len(hub.requests_to(path(GATED), "HEAD")) == len(RETRY_DELAYS) + 1  # a refusal is not cached
