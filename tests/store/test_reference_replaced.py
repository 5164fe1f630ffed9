"""The data files' reference tables in the store (catalogue/store/file.py KEYED_REFERENCE,
sql/steps/replace_reference.sql): each publish leaves exactly tonight's rows, a changed row
replaced under its key, a dropped one deleted, a new one added; a run that states none (a
failed night) leaves the stored rows as they are."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
from support import store_runs as runs

from speccat.catalogue.store.file import KEYED_REFERENCE, open_readonly, publish

REPO = "Qwen/Qwen3-0.6B"


def stored(path, table: str) -> list[tuple]:
    with contextlib.closing(open_readonly(path)) as con:
        return sorted(con.execute(f"SELECT * FROM {table}").fetchall(), key=repr)


def rows(run, table: str) -> list[tuple]:
    return sorted((tuple(row.values()) for row in getattr(run, table)), key=repr)


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    path = tmp_path_factory.mktemp("reference") / "catalogue.duckdb"
    run = runs.make_run("night-1", [runs.censused(REPO)], day=1)
    publish(path, run)
    return path, run


def test_every_keyed_table_holds_the_nights_rows(first):
    path, run = first
    for table in KEYED_REFERENCE:
        assert getattr(run, table), table  # the run states every one
        assert stored(path, table) == rows(run, table), table


def test_a_changed_a_dropped_and_a_new_row_replace_the_stored(first, tmp_path):
    path, run = first
    copy = tmp_path / "catalogue.duckdb"
    copy.write_bytes(path.read_bytes())
    accelerators = [dict(a) for a in run.accelerators]
    accelerators[0]["memory_bytes"] = 1.0  # changed under its key
    schedules = [dict(s) for s in run.schedules][1:]  # the first dropped
    losses = [*map(dict, run.losses), {**run.losses[0], "loss": "focal", "is_default": False}]  # a new one
    second = dataclasses.replace(runs.make_run("night-2", [runs.censused(REPO)], day=2, new=()),
                                 accelerators=accelerators, schedules=schedules, losses=losses)  # fmt: skip
    publish(copy, second)
    for table in ("accelerators", "schedules", "losses"):
        assert stored(copy, table) == rows(second, table), table
    assert len(stored(copy, "schedules")) == len(run.schedules) - 1 and len(stored(copy, "losses")) == len(run.losses) + 1


def test_a_run_stating_none_leaves_them(first, tmp_path):
    path, run = first
    copy = tmp_path / "catalogue.duckdb"
    copy.write_bytes(path.read_bytes())
    empty = {table: () for table in KEYED_REFERENCE}
    publish(copy, dataclasses.replace(runs.make_run("night-2", [runs.censused(REPO)], day=2, new=()), **empty))
    for table in KEYED_REFERENCE:
        assert stored(copy, table) == rows(run, table), table
