"""A reader never breaks the night: the writer waits (with backoff, up to a bound) for another
process holding the catalogue read-write, then publishes, or gives up with one `locked` line,
exit 3, the published file byte for byte as it was. Readers open read-only and never wait."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from support import store_runs as runs

from speccat.catalogue.store.file import open_readonly, publish
from speccat.catalogue.store.night import StoreError
from speccat.flows.cli import main

pytestmark = pytest.mark.slow

# A second process that opens the catalogue read-write (as the duckdb CLI or harlequin do by
# default), says so, and holds it for argv[2] seconds.
HOLDER = (
    "import duckdb, sys, time\n"
    "con = duckdb.connect(sys.argv[1])\n"
    "print('held', flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
    "con.close()\n"
)
READER = "import duckdb, sys, time\ncon = duckdb.connect(sys.argv[1], read_only=True)\nprint('held', flush=True)\ntime.sleep(60)\n"


def hold(path, seconds: float, script: str = HOLDER) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", script, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def catalogue(tmp_path):
    path = tmp_path / "catalogue.duckdb"
    shutil.copy(runs.two_night_catalogue(), path)
    return path


def test_a_publish_waits_for_a_holder_that_lets_go_within_the_bound(catalogue):
    holder = hold(catalogue, 3)
    try:
        clock = time.monotonic()
        publish(catalogue, runs.make_run("night-3", [runs.censused("Qwen/Qwen3-0.6B")], day=3), lock_wait=60)
        waited = time.monotonic() - clock
    finally:
        holder.kill()
        holder.wait()
    assert waited > 1  # it did wait for the holder (which held the file for 3 s)
    con = open_readonly(catalogue)
    try:
        assert con.execute("SELECT run_id FROM latest_run").fetchone() == ("night-3",)
    finally:
        con.close()


def test_a_publish_gives_up_past_the_bound_and_leaves_the_file_byte_identical(catalogue):
    before = catalogue.read_bytes()
    holder = hold(catalogue, 120)
    try:
        with pytest.raises(StoreError) as caught:
            publish(catalogue, runs.make_run("night-3", [runs.censused("Qwen/Qwen3-0.6B")], day=3), lock_wait=1)
    finally:
        holder.kill()
        holder.wait()
    err = caught.value
    assert err.reason == "locked" and f"PID {holder.pid}" in str(err) and "\n" not in str(err)
    assert catalogue.read_bytes() == before
    assert not [p for p in catalogue.parent.iterdir() if ".publish-" in p.name]


def test_readers_answer_beside_another_reader_and_refuse_a_writer_in_one_line(catalogue, capsys):
    reader = hold(catalogue, 60, READER)
    try:  # read commands open read-only: another reader does not stop them
        assert main(["query", "SELECT count(*) AS n FROM runs", "--db", str(catalogue), "--format", "csv"]) == 0
        assert capsys.readouterr().out == "n\n2\n"
    finally:
        reader.kill()
        reader.wait()
    holder = hold(catalogue, 120)
    try:
        for argv in (["query", "latest_specs"], ["show", "Qwen/Qwen3-8B"], ["export", str(catalogue.parent / "out")]):
            assert main(argv + ["--db", str(catalogue)]) == 3
            out, err = capsys.readouterr()
            assert out == "" and err.count("\n") == 1 and err.startswith("speccat: locked: ") and f"PID {holder.pid}" in err
            assert main(argv + ["--db", str(catalogue), "--json"]) == 3
            assert json.loads(capsys.readouterr().out)["error"]["reason"] == "locked"
    finally:
        holder.kill()
        holder.wait()


def test_refresh_against_a_held_catalogue_ends_in_one_line_exit_3_and_changes_nothing(catalogue, tmp_path, prefect_api):
    from prefect.settings import PREFECT_API_URL
    from support.refresh_runs import copy_snapshot

    snapshot = copy_snapshot(tmp_path / "snapshot", ["Qwen/Qwen3-0.6B"])
    before = catalogue.read_bytes()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_LOGGING")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    # this session's Prefect API: the subprocess starts no ephemeral server of its own (a fresh
    # database to build), which is not what this test is about
    env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    holder = hold(catalogue, 300)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "speccat.flows.cli", "refresh", "--snapshot-dir", str(snapshot),
             "--db", str(catalogue), "--lock-wait", "2"],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 3, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("speccat:")]
    assert lines == [lines[-1]] and lines[0].startswith("speccat: locked: ") and f"PID {holder.pid}" in lines[0]
    assert "Traceback" not in done.stderr + done.stdout
    assert catalogue.read_bytes() == before
