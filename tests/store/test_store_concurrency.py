"""Atomic publishing: a writer killed mid-publish, and a reader holding the file during one."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from support import store_runs as runs

from speccat.catalogue.store.file import open_readonly, publish

pytestmark = pytest.mark.slow

WRITER = textwrap.dedent(
    """
    import pickle, sys
    from speccat.catalogue.store.file import publish
    with open(sys.argv[2], "rb") as f:
        run = pickle.load(f)
    publish(sys.argv[1], run)
    """
)

READER = textwrap.dedent(
    """
    import pathlib, sys, time
    import duckdb
    path, stop = sys.argv[1], pathlib.Path(sys.argv[2])
    con = duckdb.connect(path, read_only=True)
    print("ready", flush=True)
    while not stop.exists():
        runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
        total = con.execute("SELECT sum(total) FROM model_prices").fetchone()[0]
        print(f"{time.time():.6f} {runs} {total!r}", flush=True)
        time.sleep(0.005)
    con.close()
    con = duckdb.connect(path, read_only=True)
    print(f"reopened {con.execute('SELECT count(*) FROM runs').fetchone()[0]}", flush=True)
    """
)


def big_run():
    """Night 2 plus forty synthetic configs: a publish that takes a while."""
    base = [runs.censused(r) for r in runs.REPOS]
    extra = runs.replicated(base, 8)
    night2 = runs.second_run()
    items = {i.config_hash: i for i in extra}
    return night2.__class__(
        **{
            **night2.__dict__,
            "repos": list(night2.repos) + [runs.repo_row(i) for i in extra],
            "configs": {**night2.configs, **{h: i.config for h, i in items.items()}},
            "specs": {**night2.specs, **{h: i.spec for h, i in items.items()}},
            "prices": {**night2.prices, **{h: i.prices for h, i in items.items()}},
        }
    )


def answers(path) -> tuple:
    with contextlib.closing(open_readonly(path)) as con:
        return (
            con.execute("SELECT list(run_id ORDER BY run_id) FROM runs").fetchone()[0],
            con.execute("SELECT count(*), sum(total) FROM layer_prices").fetchone(),
            con.execute("SELECT count(*) FROM latest_specs").fetchone()[0],
        )


def test_writer_killed_mid_publish_leaves_the_catalogue_answering(tmp_path):
    path = tmp_path / "catalogue.duckdb"
    publish(path, runs.first_run())
    before = answers(path)
    run_file = tmp_path / "run.pickle"
    run_file.write_bytes(pickle.dumps(big_run()))
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writer = subprocess.Popen([sys.executable, str(script), str(path), str(run_file)])
    try:
        deadline = time.monotonic() + 60
        while not any(".publish-" in p.name for p in tmp_path.iterdir()):
            assert writer.poll() is None, "the writer ended before it started building"
            assert time.monotonic() < deadline
            time.sleep(0.001)
        time.sleep(0.2)  # into the build: copy done, staging or merging
        assert writer.poll() is None, "the publish finished before the kill; the test proves nothing"
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    assert any(".publish-" in p.name for p in tmp_path.iterdir())  # the half-built file is left
    assert answers(path) == before
    # the next store completes and clears the leftover
    publish(path, runs.second_run())
    assert answers(path)[0] == ["night-1", "night-2"]
    assert not any(".publish-" in p.name for p in tmp_path.iterdir())


def test_reader_keeps_answering_during_a_publish_and_sees_the_new_run_after(tmp_path):
    path = tmp_path / "catalogue.duckdb"
    publish(path, runs.first_run())
    script, stop = tmp_path / "reader.py", tmp_path / "stop"
    script.write_text(READER)
    reader = subprocess.Popen(
        [sys.executable, str(script), str(path), str(stop)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert reader.stdout.readline().strip() == "ready"
        started = time.time()
        publish(path, big_run())
        ended = time.time()
        time.sleep(0.05)
        stop.touch()
        out, _ = reader.communicate(timeout=60)
    finally:
        if reader.poll() is None:
            reader.kill()
    lines = out.strip().splitlines()
    assert lines[-1] == "reopened 2"
    answers_seen = [line.split() for line in lines[:-1]]
    during = [a for a in answers_seen if started <= float(a[0]) <= ended]
    assert during, "the reader answered nothing while the publish ran"
    # every answer, during the publish and after it, is the published night 1, whole
    assert {(a[1], a[2]) for a in answers_seen} == {tuple(answers_seen[0][1:3])}
    assert answers_seen[0][1] == "1"
    assert reader.returncode == 0
