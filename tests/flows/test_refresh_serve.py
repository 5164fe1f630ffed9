"""A run started by `speccat serve` logs to Prefect: a real `prefect server`, the deployment
served from a prefect.yaml of the same shape as the project's, one run triggered through the
API, and its logs read back through the API (the refusal at INFO with its reason, the summary)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest
import yaml
from conftest import ROOT
from support.prefect_server import prefect_server, stop
from support.refresh_runs import BROKEN_REPO, BROKEN_TEXT, add_config, copy_snapshot

pytestmark = pytest.mark.slow


async def _served_run_logs(deployment: str, seconds: float) -> tuple[str, list]:
    """Wait for the served deployment, run it, wait for the run to end; its state and logs."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.deployments import run_deployment

    async with get_client() as client:
        deadline = time.monotonic() + seconds
        while True:
            try:
                await client.read_deployment_by_name(deployment)
                break
            except Exception:
                assert time.monotonic() < deadline, f"{deployment} was never served"
                await asyncio.sleep(1)
        flow_run = await run_deployment(deployment, timeout=seconds, poll_interval=2)
        # The run's process sends its logs in batches: the last batch may land after its final
        # state, so read until the night's summary line is there (or the time is up).
        log_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run.id]))
        while True:
            logs = await client.read_logs(log_filter=log_filter)
            if any(log.message.startswith("refresh ") for log in logs) or time.monotonic() > deadline:
                return flow_run.state.type.value, logs
            await asyncio.sleep(2)


def test_a_served_run_is_logged_through_prefects_api(tmp_path):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    snapshot = copy_snapshot(tmp_path / "snapshot", ["Qwen/Qwen3-0.6B"])
    add_config(snapshot, BROKEN_REPO, BROKEN_TEXT)
    db = tmp_path / "served.duckdb"
    deployment = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"][0]
    deployment.update(
        parameters={"source": "snapshot", "snapshot_dir": str(snapshot), "db": str(db)},
        schedules=[],  # run once, by the test, not by the clock
    )
    served = tmp_path / "prefect.yaml"
    served.write_text(yaml.safe_dump({"name": "speccat", "deployments": [deployment]}))

    # Only what an operator's shell would have, plus the server to talk to.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DO_NOT_TRACK"))}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    with prefect_server(env, logs_dir / "server.txt") as url:
        env.update(PREFECT_API_URL=url)
        serve = subprocess.Popen(
            [sys.executable, "-m", "speccat.flows.cli", "serve", "--file", str(served)],
            cwd=ROOT, env=env, stdout=open(logs_dir / "serve.txt", "w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            with temporary_settings({PREFECT_API_URL: url}):
                state, logs = asyncio.run(_served_run_logs(f"refresh/{deployment['name']}", seconds=480))
        finally:
            stop(serve)
    assert state == "COMPLETED", (logs_dir / "serve.txt").read_text()[-3000:]
    lines = {(log.level, log.message) for log in logs}
    # the broken config: refused at INFO with its reason, never at ERROR
    refused = [m for level, m in lines if BROKEN_REPO in m]
    assert refused and all(level == 20 for level, m in lines if BROKEN_REPO in m), lines
    assert any("bad_json" in m for m in refused), refused
    assert not [m for level, m in lines if level >= 40], lines
    # the night's summary reached the API too, and the catalogue was published
    assert any(m.startswith("refresh ") and "'refused'" in m for _, m in lines), lines
    assert db.is_file()
