"""`speccat refresh` and `speccat serve`: arguments, progress, output, and the deployment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.refresh_runs import copy_snapshot, rows

from speccat.catalogue.records.settings import load_settings
from speccat.flows import cli, progress
from speccat.flows.cli_refresh import load_deployment, serve_options


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_refresh_prints_progress_and_the_counts(prefect_api, tmp_path, capsys):
    snapshot = copy_snapshot(tmp_path / "snapshot", ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B"])
    db = tmp_path / "cat.duckdb"
    try:
        code = cli.main(["refresh", "--snapshot-dir", str(snapshot), "--db", str(db), "--no-report", "--json"])
    finally:
        progress.disable()
    out, err = capsys.readouterr()
    assert code == 0
    counts = json.loads(out)
    assert (counts["repos"], counts["configs"], counts["failures"], counts["db"]) == (2, 2, {}, str(db))
    assert "list: 2 repos from snapshot" in err and "fetch: 2/2" in err and f"published {db}" in err
    assert rows(db, "SELECT count(*) FROM specs") == [(2,)]

    code = cli.main(["refresh", "--snapshot-dir", str(snapshot), "--db", str(db), "--no-report"])
    progress.disable()
    out, _ = capsys.readouterr()
    assert code == 0
    assert "repos 2, configs 2 (2 already stored, 0 new" in out
    assert f"speccat query" in out and f"--db {db}" in out


@pytest.mark.slow
def test_refresh_publishes_into_a_lake(prefect_api, tmp_path, capsys):
    from speccat.catalogue.store.lake import Lake, open_lake

    snapshot = copy_snapshot(tmp_path / "snapshot", ["Qwen/Qwen3-0.6B"])
    catalog, data = f"sqlite:{tmp_path / 'lake.sqlite'}", str(tmp_path / "lake-data")
    argv = ["refresh", "--snapshot-dir", str(snapshot), "--lake", catalog, "--lake-data", data, "--no-report"]
    try:
        assert cli.main(argv) == 0
        assert cli.main(argv) == 0  # a second night into the same lake keeps one row per key
    finally:
        progress.disable()
    out = capsys.readouterr().out
    assert "published ducklake:" in out
    # the second night found the config in the lake and left it alone, as with the file
    assert "configs 1 (0 already stored, 1 new" in out and "configs 1 (1 already stored, 0 new: 0 censused, 0 from the cache)" in out
    # the read commands read the lake too (--lake, --lake-data)
    lake_args = ["--lake", catalog, "--lake-data", data]
    assert cli.main(["query", "SELECT count(*) AS n FROM runs", "--format", "csv", *lake_args]) == 0
    assert capsys.readouterr().out == "n\n2\n"
    assert cli.main(["show", "qwen/qwen3-0.6b", "--json", *lake_args]) == 0
    assert json.loads(capsys.readouterr().out)["repo"]["repo_id"] == "Qwen/Qwen3-0.6B"
    assert cli.main(["export", str(tmp_path / "out"), *lake_args]) == 0 and (tmp_path / "out" / "runs.parquet").is_file()
    capsys.readouterr()
    assert cli.main(["query", "latest_specs", "--lake", f"sqlite:{tmp_path / 'none.sqlite'}", "--lake-data", data]) == 3
    assert capsys.readouterr().err.startswith("speccat: no_catalogue: ")
    with open_lake(Lake(catalog, data)) as con:
        assert con.execute("SELECT count(*), count(DISTINCT status) FROM runs").fetchone() == (2, 1)
        assert con.execute("SELECT name FROM specs").fetchall() == [("Qwen/Qwen3-0.6B",)]
        # one kind, priced at every setting of the grid and, op by op, at every setting of the curve
        grid = load_settings()
        assert con.execute("SELECT count(*) FROM full_prices").fetchone()[0] == len(grid.settings)
        assert con.execute("SELECT count(DISTINCT setting_id) FROM op_prices").fetchone()[0] == len(grid.curve)
        assert con.execute("SELECT count(*) FROM settings").fetchone()[0] == len(grid.stored)


@pytest.mark.slow
def test_refresh_with_no_report_publishes_without_writing_or_linking_one(prefect_api, tmp_path, capsys):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    snapshot = copy_snapshot(tmp_path / "snapshot", ["Qwen/Qwen3-0.6B"])
    db = tmp_path / "cat.duckdb"
    try:
        assert cli.main(["refresh", "--snapshot-dir", str(snapshot), "--db", str(db), "--no-report", "--json"]) == 0
    finally:
        progress.disable()
    counts = json.loads(capsys.readouterr().out)
    assert counts["status"] == "completed" and rows(db, "SELECT name FROM specs") == [("Qwen/Qwen3-0.6B",)]
    assert counts["report"] is None and not (tmp_path / "cat-report").exists()  # the report's folder would be cat-report/
    with get_client(sync_client=True) as client:
        linked = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["refresh-report"]), flow_run_id=ArtifactFilterFlowRunId(any_=[counts["run_id"]]))
        )
    assert linked == []


def test_refresh_refuses_a_lake_without_its_data_path(capsys):
    assert cli.main(["refresh", "--lake", "sqlite:x.sqlite"]) == 2
    assert "--lake and --lake-data go together" in capsys.readouterr().err


def test_refresh_refuses_dask_without_an_address(capsys):
    assert cli.main(["refresh", "--task-runner", "dask"]) == 2
    assert "--dask-address" in capsys.readouterr().err


def test_the_deployment_is_nightly_at_three_from_the_hub():
    deployment = load_deployment(ROOT / "prefect.yaml", "nightly-refresh")
    options = serve_options(deployment)
    assert options["name"] == "nightly-refresh"
    assert [(s.cron, s.timezone) for s in options["schedules"]] == [("0 3 * * *", "UTC")]
    assert options["parameters"]["source"] == "hub"
    assert options["global_limit"] == 1
    # The entrypoint names the flow this package defines, and its parameters are the flow's.
    path, name = deployment["entrypoint"].split(":")
    assert (ROOT / path).is_file() and name == "refresh"
    from speccat.flows.refresh import refresh

    assert set(deployment["parameters"]) <= set(refresh.parameters.properties)


def test_the_crawl_deployment_lists_the_whole_hub_into_a_lake_and_is_off_until_turned_on():
    deployment = load_deployment(ROOT / "prefect.yaml", "hub-crawl")
    options = serve_options(deployment)
    parameters = options["parameters"]
    assert (parameters["source"], parameters["scope"]) == ("hub", "all")
    assert parameters["lake"] and parameters["lake_data"] and "db" not in parameters
    assert [s.active for s in options["schedules"]] == [False] and options["global_limit"] == 1
    from speccat.flows.refresh import refresh

    assert deployment["entrypoint"] == "flows/refresh.py:refresh"
    assert set(parameters) <= set(refresh.parameters.properties)


def test_serve_check_prints_the_deployment(capsys):
    assert cli.main(["serve", "--check", "--file", str(ROOT / "prefect.yaml")]) == 0
    out = capsys.readouterr().out
    assert "deployment nightly-refresh" in out and "0 3 * * * (UTC)" in out
    assert json.loads(out.split("parameters: ", 1)[1])["source"] == "hub"


def test_serve_refuses_without_a_prefect_server(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_HOME"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "speccat.flows.cli", "serve"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "prefect server start" in done.stderr and "Traceback" not in done.stderr


def test_serve_refuses_an_unknown_deployment(tmp_path, capsys):
    (tmp_path / "prefect.yaml").write_text(yaml.safe_dump({"deployments": [{"name": "other"}]}))
    assert cli.main(["serve", "--check", "--file", str(tmp_path / "prefect.yaml")]) == 2
    assert "no deployment named 'nightly-refresh'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_night_of_expected_refusals_logs_no_error_and_an_empty_night_is_recorded(tmp_path):
    from support.refresh_runs import BROKEN_REPO, BROKEN_TEXT, add_config

    snapshot = copy_snapshot(tmp_path / "snapshot", ["Qwen/Qwen3-0.6B"])
    add_config(snapshot, BROKEN_REPO, BROKEN_TEXT)
    db = tmp_path / "cat.duckdb"
    # Only what a shell would have: speccat itself must turn telemetry off and keep Prefect quiet.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DO_NOT_TRACK"))}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    speccat = [sys.executable, "-m", "speccat.flows.cli", "refresh", "--db", str(db)]
    done = subprocess.run(speccat + ["--snapshot-dir", str(snapshot)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "ERROR" not in output and "Traceback" not in output and "telemetry" not in output, output
    assert "partial" in done.stdout and "refused: bad_json 1" in done.stdout and f"failing repos: {BROKEN_REPO}" in done.stdout
    good = rows(db, "SELECT run_id FROM latest_run")

    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(speccat + ["--snapshot-dir", str(empty), "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "empty"
    assert rows(db, "SELECT status, n_repos FROM runs ORDER BY started") == [("partial", 2), ("empty", 0)]
    assert rows(db, "SELECT run_id FROM latest_run") == good  # the empty night is not the latest


@pytest.mark.slow
def test_a_runs_refusals_reach_prefects_api_at_info(prefect_api, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from support.refresh_runs import BROKEN_REPO, BROKEN_TEXT, add_config, run_refresh

    import logging

    snapshot = copy_snapshot(tmp_path / "snapshot", ["Qwen/Qwen3-0.6B"])
    add_config(snapshot, BROKEN_REPO, BROKEN_TEXT)
    # `speccat refresh` sets PREFECT_LOGGING_LEVEL=INFO unless told otherwise (the suite runs at
    # WARNING, read once at import): the flow's loggers at INFO, as under the CLI.
    prefect_logger = logging.getLogger("prefect")
    level = prefect_logger.level
    prefect_logger.setLevel(logging.INFO)
    try:
        state, counts = run_refresh(source="snapshot", snapshot_dir=str(snapshot), db=str(tmp_path / "cat.duckdb"), report=False)
    finally:
        prefect_logger.setLevel(level)
    assert counts["refused"] == {"bad_json": 1} and counts["failed"] == {} and counts["failing_repos"] == [BROKEN_REPO]
    # Logs reach the API in batches, the last one possibly after the run's final state: read
    # until the refusal is there, or a minute has passed.
    deadline = time.monotonic() + 60
    with get_client(sync_client=True) as client:
        while True:
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id])))
            refused = [log for log in logs if f"refused {BROKEN_REPO} at fetch: bad_json" in log.message]
            if refused or time.monotonic() > deadline:
                break
            time.sleep(1)
    assert [log.level for log in refused] == [20]  # INFO, not ERROR
