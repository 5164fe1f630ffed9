"""Faults during a night, and the published catalogue through them (issue 7, item 3).

One catalogue lives through a chain of nights (`faults`, shared by the tests below):

0. baseline: two shipped configs, A and B, published;
1. a census child is killed (SIGKILL) while it censuses the new config C;
2. the census children run out of their memory budget (C and D, both new);
3. the flow's process is killed (SIGKILL) just before the new catalogue replaces the
   published one (a `speccat refresh` subprocess, paused at that moment);
4. the disk is full when the publish writes (a `speccat refresh` subprocess whose files may
   not grow past the published catalogue's size: RLIMIT_FSIZE, with SIGXFSZ ignored, so every
   write past it fails as on a full disk);
5. a rerun with nothing wrong.

After each fault the published catalogue opens and answers as before (the nights that publish
add their failures rows; the ones that cannot publish leave the file byte for byte), and the
rerun ends where a night without faults ends (a reference catalogue built from the same
snapshot in one clean night). C and D are shipped configs with another layer count, so no
other test has censused them: their census really runs here.
"""

from __future__ import annotations

import contextlib
import filecmp
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import load_shipped
from support.refresh_runs import RUN_TABLES, add_config, copy_snapshot, rows, run_refresh, table_differences
from support.reliability_runs import answers

from speccat.catalogue.store.file import TABLES

pytestmark = pytest.mark.slow

A, B = "Qwen/Qwen3-0.6B", "HuggingFaceTB/SmolLM2-135M-Instruct"
C, D = "speccat-faults/smollm2-3-layers", "speccat-faults/smollm2-5-layers"
# The tables a reader's answers come from (the run tables record each night instead).
PRICED = ("specs", "kinds", "stack", "measured", "layer_prices", "full_prices")
CONTENT = tuple(t for t in TABLES if t not in RUN_TABLES)
KILL_AFTER_S = 0.1  # a fork-server child alive this long is a census (the warm-up child lives ~ms)
MEMORY_MIB = 2  # far below what pricing needs (16 MiB or more: tests/flows/test_reliability_budget.py)

PAUSE_BEFORE_RENAME = """
import os, pathlib, sys, time
db, marker = os.path.realpath(sys.argv[1]), pathlib.Path(sys.argv[2])
real_replace = os.replace

def paused(src, dst, *args, **kwargs):
    if os.path.realpath(dst) == db:  # the new catalogue is complete and about to replace the old
        marker.touch()
        time.sleep(600)
    return real_replace(src, dst, *args, **kwargs)

os.replace = paused
from speccat.flows.cli import main
sys.exit(main(sys.argv[3:]))
"""


def variant(layers: int) -> str:
    return json.dumps(dict(load_shipped(B), num_hidden_layers=layers))


def leftovers(db: Path) -> list[str]:
    return sorted(p.name for p in db.parent.glob(f".{db.name}.publish-*"))


def fork_server_children() -> list[int]:
    from multiprocessing import forkserver

    server = forkserver._forkserver._forkserver_pid
    if not server:
        return []
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == server:  # ppid
                found.append(int(stat.parent.name))
    return found


class CensusKiller(threading.Thread):
    """SIGKILLs the first census child seen alive for KILL_AFTER_S: a worker killed mid-census."""

    def __init__(self):
        super().__init__(name="census-killer", daemon=True)
        self.stop = threading.Event()
        self.killed: list[int] = []

    def run(self) -> None:
        first_seen: dict[int, float] = {}
        while not self.stop.is_set():
            for pid in fork_server_children():
                if time.monotonic() - first_seen.setdefault(pid, time.monotonic()) >= KILL_AFTER_S:
                    os.kill(pid, signal.SIGKILL)
                    self.killed.append(pid)
                    return
            time.sleep(0.005)


def cli_env(tmp: Path) -> dict[str, str]:
    """A `speccat refresh` subprocess against this session's Prefect API and result store."""
    from prefect.settings import PREFECT_API_URL, PREFECT_RESULTS_LOCAL_STORAGE_PATH

    return {
        **os.environ,
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(PREFECT_RESULTS_LOCAL_STORAGE_PATH.value()),
        "PREFECT_HOME": str(tmp / "prefect-home"),
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "TRANSFORMERS_VERBOSITY": "error",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


@dataclass
class Subprocess:
    returncode: int
    stdout: str
    stderr: str
    leftovers: list[str]


@dataclass
class Faults:
    db: Path
    reference: Path
    baseline: Path
    killed: Path  # copies of the catalogue after nights 1 to 4
    out_of_memory: Path
    after_paused: Path
    after_disk_full: Path
    states: dict[str, Any]
    counts: dict[str, dict]
    killed_pids: list[int]
    paused: Subprocess
    disk_full: Subprocess
    disk_full_limit: int


@pytest.fixture(scope="module")
def faults(prefect_api, tmp_path_factory) -> Faults:
    tmp = tmp_path_factory.mktemp("faults")
    db = tmp / "catalogue.duckdb"
    snapshot = copy_snapshot(tmp / "snapshot", [A, B])
    states, counts = {}, {}

    def night(name: str, **options) -> None:
        states[name], counts[name] = run_refresh(source="snapshot", snapshot_dir=str(snapshot), db=str(db), report=False, **options)

    night("baseline")
    shutil.copy(db, tmp / "baseline.duckdb")

    add_config(snapshot, C, variant(3))
    killer = CensusKiller()
    killer.start()
    try:
        night("killed")
    finally:
        killer.stop.set()
        killer.join()
    shutil.copy(db, tmp / "killed.duckdb")

    add_config(snapshot, D, variant(5))
    night("out_of_memory", memory_limit=MEMORY_MIB)
    shutil.copy(db, tmp / "out_of_memory.duckdb")

    argv = ["refresh", "--snapshot-dir", str(snapshot), "--db", str(db), "--json"]
    marker = tmp / "paused"
    child = subprocess.Popen(
        [sys.executable, "-c", PAUSE_BEFORE_RENAME, str(db), str(marker), *argv],
        env=cli_env(tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert child.poll() is None, f"the refresh ended before its publish paused: {child.communicate()}"
            assert time.monotonic() < deadline, "the refresh never reached its publish"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    paused = Subprocess(child.returncode, out, err, leftovers(db))
    shutil.copy(db, tmp / "after_paused.duckdb")

    size = db.stat().st_size

    def full_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    done = subprocess.run(
        [sys.executable, "-m", "speccat.flows.cli", *argv],
        env=cli_env(tmp), capture_output=True, text=True, timeout=600, preexec_fn=full_disk,
    )  # fmt: skip
    disk_full = Subprocess(done.returncode, done.stdout, done.stderr, leftovers(db))
    shutil.copy(db, tmp / "after_disk_full.duckdb")

    night("rerun")
    reference = tmp / "reference.duckdb"
    states["reference"], counts["reference"] = run_refresh(source="snapshot", snapshot_dir=str(snapshot), db=str(reference), report=False)
    return Faults(
        db, reference, tmp / "baseline.duckdb", tmp / "killed.duckdb", tmp / "out_of_memory.duckdb",
        tmp / "after_paused.duckdb", tmp / "after_disk_full.duckdb", states, counts, killer.killed, paused, disk_full, size,
    )  # fmt: skip


def test_the_baseline_night_publishes_a_and_b(faults):
    assert faults.states["baseline"].is_completed()
    assert {r for (r,) in rows(faults.baseline, "SELECT name FROM specs")} == {A, B}


# -- 1. a census child killed mid-census --------------------------------------------------


def test_a_census_child_killed_mid_census_is_a_failures_row_and_the_night_goes_on(faults):
    assert len(faults.killed_pids) == 1, "no census child was killed: the test proves nothing"
    assert faults.states["killed"].is_completed()
    counts = faults.counts["killed"]
    # Expected: A and B already stored (skipped), C the one new config, killed.
    assert (counts["stored"], counts["new_configs"], counts["censused"]) == (2, 1, 0)
    assert counts["failures"] == {"census_failed": 1}
    ((repo, stage, reason, message),) = rows(faults.killed, "SELECT repo_id, stage, reason, message FROM failures")
    assert (repo, stage, reason) == (C, "census", "census_failed")
    assert f"exit code -{signal.SIGKILL.value}" in message
    assert rows(faults.killed, "SELECT status FROM runs ORDER BY started") == [("completed",), ("partial",)]


def test_after_the_killed_census_the_catalogue_answers_as_before(faults):
    assert answers(faults.killed, (A, B)) == answers(faults.baseline, (A, B))
    assert table_differences(faults.baseline, faults.killed, PRICED) == {t: (0, 0) for t in PRICED}


# -- 2. the memory budget -----------------------------------------------------------------


def test_censuses_past_their_memory_budget_are_too_large_rows_and_the_night_goes_on(faults):
    assert faults.states["out_of_memory"].is_completed()
    counts = faults.counts["out_of_memory"]
    assert (counts["stored"], counts["new_configs"], counts["censused"]) == (2, 2, 0)
    assert counts["failures"] == {"too_large": 2}
    run_id = counts["run_id"]
    failures = rows(faults.out_of_memory, "SELECT repo_id, stage, reason, message FROM failures WHERE run_id = ? ORDER BY repo_id", [run_id])
    assert [f[:3] for f in failures] == [(C, "census", "too_large"), (D, "census", "too_large")]
    assert all(f"memory budget of {MEMORY_MIB} MiB" in f[3] for f in failures)


def test_after_the_memory_failures_the_catalogue_answers_as_before(faults):
    assert answers(faults.out_of_memory, (A, B)) == answers(faults.baseline, (A, B))
    assert table_differences(faults.baseline, faults.out_of_memory, PRICED) == {t: (0, 0) for t in PRICED}


# -- 3. the flow's process killed mid-publish ---------------------------------------------


def test_the_flow_killed_before_its_rename_leaves_the_published_file_untouched(faults):
    assert faults.paused.returncode == -signal.SIGKILL, faults.paused.stderr
    assert len(faults.paused.leftovers) == 1  # the complete new catalogue, never renamed
    assert filecmp.cmp(faults.after_paused, faults.out_of_memory, shallow=False)
    assert answers(faults.after_paused, (A, B)) == answers(faults.baseline, (A, B))


# -- 4. disk full at publish --------------------------------------------------------------


def test_a_full_disk_fails_the_publish_cleanly(faults):
    done = faults.disk_full
    assert done.returncode == 3, done.stderr  # the catalogue unavailable (README, exit status), through the CLI's one handler
    # With --json the CLI's report is one JSON object on stdout, and the flow logs one line, no traceback.
    error = json.loads(done.stdout)["error"]
    assert error["reason"] == "write_failed" and "File too large" in error["message"], done.stdout
    assert "the published one is unchanged" in error["message"] and "\n" not in error["message"]
    assert done.leftovers == []  # its own half-written file is gone, and night 3's leftover too


def test_after_the_full_disk_the_published_file_is_the_one_night_2_published(faults):
    assert faults.out_of_memory.stat().st_size == faults.disk_full_limit  # the limit was the file's size
    assert filecmp.cmp(faults.after_disk_full, faults.out_of_memory, shallow=False)
    assert answers(faults.after_disk_full, (A, B)) == answers(faults.baseline, (A, B))
    # Neither failed night left a run in the catalogue.
    run_ids = [r for (r,) in rows(faults.db, "SELECT run_id FROM runs ORDER BY started")]
    assert run_ids == [faults.counts[n]["run_id"] for n in ("baseline", "killed", "out_of_memory", "rerun")]


# -- 5. the rerun -------------------------------------------------------------------------


def test_the_rerun_completes_and_ends_where_a_clean_night_ends(faults):
    assert faults.states["rerun"].is_completed()
    counts = faults.counts["rerun"]
    assert counts["failures"] == {}
    assert (counts["stored"], counts["new_configs"]) == (2, 2)
    assert table_differences(faults.reference, faults.db, CONTENT) == {t: (0, 0) for t in CONTENT}
    assert leftovers(faults.db) == []
    assert {r for (r,) in rows(faults.db, "SELECT name FROM specs")} == {A, B, C, D}
