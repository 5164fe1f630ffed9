"""The Dask task runner: the census stage on a LocalCluster of two worker processes stores the
same rows as the default local runner (the snapshot run of tests/support/refresh_runs.py)."""

from __future__ import annotations

import pytest
from conftest import load_shipped
from support.refresh_runs import copy_snapshot, rows, run_refresh

from speccat.census import config_hash

pytestmark = pytest.mark.slow

# A dense model and a MoE: one config for each of the two workers.
SUBSET = ["Qwen/Qwen3-0.6B", "mistralai/Mixtral-8x7B-v0.1"]
CONTENT = ("configs", "specs", "kinds", "stack", "measured", "layer_prices", "full_prices")


def test_dask_stores_the_same_rows_as_the_local_runner(snapshot_runs, tmp_path):
    import dask
    from distributed import Client, LocalCluster

    snapshot = copy_snapshot(tmp_path / "snapshot", SUBSET)
    db = tmp_path / "catalogue.duckdb"
    # Census tasks start child processes, which a daemonic Dask worker may not have.
    with dask.config.set({"distributed.worker.daemon": False}):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            # rebuild: the census really runs on the workers instead of coming from the cache.
            state, counts = run_refresh(
                source="snapshot",
                snapshot_dir=str(snapshot),
                db=str(db),
                task_runner="dask",
                dask_address=cluster.scheduler_address,
                rebuild=True,
                report=False,
            )
            with Client(cluster) as client:
                # How many tasks of each prefix the scheduler saw finish (state "memory").
                finished = client.run_on_scheduler(
                    lambda dask_scheduler: {
                        name: prefix.state_counts["memory"] for name, prefix in dask_scheduler.task_prefixes.items()
                    }
                )
    assert state.is_completed()
    assert (counts["censused"], counts["failures"]) == (len(SUBSET), {})
    assert [n for name, n in finished.items() if "analyse_config" in name] == [len(SUBSET)]

    hashes = sorted(config_hash(load_shipped(r)) for r in SUBSET)
    marks = ", ".join("?" * len(hashes))
    for table in CONTENT:
        query = f"SELECT * FROM {table} WHERE config_hash IN ({marks}) ORDER BY ALL"
        on_dask, local = rows(db, query, hashes), rows(snapshot_runs.db, query, hashes)
        assert on_dask and on_dask == local, table
