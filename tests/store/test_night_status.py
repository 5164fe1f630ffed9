"""A night that fails, or lists nothing, is recorded but never becomes the latest night; and
`changes` says what changed between the two latest good nights (sql/views/latest_run.sql,
changes.sql, latest_specs.sql)."""

from __future__ import annotations

import dataclasses
import shutil

from support import store_runs as runs

from speccat.catalogue.store.file import open_readonly, publish

# What an analyst reads as "the latest night", each query's rows in a fixed order.
LATEST = {
    "latest_run": "SELECT * FROM latest_run",
    "previous_run": "SELECT * FROM previous_run",
    "latest_specs": "SELECT * FROM latest_specs ORDER BY repo_id",
    "repo_prices": "SELECT count(*), sum(total), count(DISTINCT repo_id) FROM repo_prices",
    "changes": "SELECT * FROM changes ORDER BY repo_id",
}


def answers(path) -> dict[str, list[tuple]]:
    con = open_readonly(path)
    try:
        return {name: con.execute(text).fetchall() for name, text in LATEST.items()}
    finally:
        con.close()


def failed_night(run_id: str, day: int):
    listing = {"repo_id": "(listing)", "stage": "list", "reason": "fetch_failed", "message": "503 after 3 retries"}
    night = runs.make_run(run_id, [], day=day, repos=[], failures=[listing], status="failed")
    return dataclasses.replace(night, reason="fetch_failed", message="the listing failed: 503 after 3 retries")


def test_a_failed_and_an_empty_night_leave_the_latest_night_answering_as_before(tmp_path):
    path = tmp_path / "catalogue.duckdb"
    shutil.copy(runs.two_night_catalogue(), path)
    before = answers(path)
    assert before["latest_run"][0][0] == "night-2" and before["previous_run"][0][0] == "night-1"
    assert before["repo_prices"][0][0] > 0 and len(before["latest_specs"]) >= 5

    publish(path, failed_night("night-3-failed", day=3))
    publish(path, runs.make_run("night-4-empty", [], day=4, repos=[], status="empty"))

    assert answers(path) == before
    con = open_readonly(path)
    try:
        rows = con.execute("SELECT run_id, status, reason, message, n_repos FROM runs ORDER BY started").fetchall()
    finally:
        con.close()
    assert rows[2:] == [
        ("night-3-failed", "failed", "fetch_failed", "the listing failed: 503 after 3 retries", 0),
        ("night-4-empty", "empty", None, None, 0),
    ]


def test_changes_lists_repriced_still_failing_and_removed_repos_and_marks_unlisted_ones(tmp_path):
    path = tmp_path / "catalogue.duckdb"
    llama, qwen = runs.censused("meta-llama/Llama-3.1-8B-Instruct"), runs.censused("Qwen/Qwen3-0.6B")
    broken = {"repo_id": "acme/broken", "stage": "census", "reason": "bad_json", "message": "line 1"}
    first = runs.make_run("n1", [llama, qwen], day=1, repos=[runs.repo_row(llama), runs.repo_row(qwen), {"repo_id": "acme/broken"}], failures=[broken])
    # Night 2: the same Llama priced under new records, Qwen no longer listed, the broken repo still broken.
    second = runs.make_run("n2", [llama], day=2, repos=[runs.repo_row(llama), {"repo_id": "acme/broken"}], failures=[broken], records="records-v2")
    publish(path, first)
    publish(path, second)
    con = open_readonly(path)
    try:
        changes = con.execute("SELECT repo_id, change, repriced_because, failed_reason FROM changes ORDER BY repo_id").fetchall()
        listed = dict(con.execute("SELECT repo_id, listed FROM latest_specs").fetchall())
    finally:
        con.close()
    old = runs.records().version
    assert changes == [
        ("Qwen/Qwen3-0.6B", "removed", None, None),
        ("acme/broken", "failing", None, "bad_json"),
        ("meta-llama/Llama-3.1-8B-Instruct", "repriced", f"records {old} -> records-v2", None),
    ]
    # latest_specs reads the latest night's versions: Qwen has no prices under records-v2 but
    # its spec is there (same census version), kept and marked as no longer listed.
    assert listed == {"meta-llama/Llama-3.1-8B-Instruct": True, "Qwen/Qwen3-0.6B": False}
