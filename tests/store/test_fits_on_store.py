"""The store builds the table fits_on for the specs that lack it (sql/steps/fits_on.sql): a
night that brings nothing new computes nothing, a night with other questions (another
plan_version) answers every spec again beside the rows kept, and the view reads the latest."""

from __future__ import annotations

from dataclasses import replace

import duckdb
from support import store_runs

from speccat.catalogue.records.cost import load_accelerators
from speccat.catalogue.records.fits_on import Questions, load_questions, plan_rows
from speccat.catalogue.records.schedules import load_schedules
from speccat.catalogue.records.states import load_states
from speccat.catalogue.store.file import publish

REPO = "Qwen/Qwen3-0.6B"


def rows(db, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_fits_on_is_built_once_per_spec_and_plan(tmp_path):
    item = store_runs.censused(REPO)
    db = tmp_path / "catalogue.duckdb"
    publish(db, store_runs.make_run("night-1", [item], fits_on=True))
    first = rows(db, "SELECT * FROM fits_on ORDER BY ALL")
    questions = load_questions()
    assert len(first) == 2 * 3 * len(questions.gpus) * len(questions.gpu_mem_gib)  # stacks x grid lengths x counts x sizes
    assert {r[0] for r in first} == {item.config_hash}

    # The same spec again: its rows are there at this plan, nothing is computed or duplicated.
    publish(db, store_runs.make_run("night-2", [item], day=2, new=(), fits_on=True))
    assert rows(db, "SELECT * FROM fits_on ORDER BY ALL") == first

    # Other questions (one size, two counts): a new plan_version, every spec answered again; the
    # rows of the old plan are kept, and the view reads the new ones only.
    other = Questions((24,), ("NVIDIA L4",), (1, 2), "other")
    night = replace(store_runs.make_run("night-3", [item], day=3, new=()),
                    **plan_rows(other, store_runs.grid(), load_states(), load_accelerators(), load_schedules()))  # fmt: skip
    publish(db, night)
    plans = rows(db, "SELECT plan_version, count(*) FROM fits_on GROUP BY 1 ORDER BY 2")
    assert [n for _, n in plans] == [2 * 3 * 2 * 1, len(first)]
    viewed = rows(db, "SELECT DISTINCT gpus, gpu_mem_gib FROM repo_fits_on ORDER BY ALL")
    assert viewed == [(1, 24), (2, 24)]
    # The answers at the new plan are the old plan's for the same question.
    old = rows(db, "SELECT stack, seq_length, gpus, fits, dp, tp, pp, cp, mask, total_bytes FROM fits_on "
                   f"WHERE plan_version = '{plans[1][0]}' AND gpus <= 2 AND gpu_mem_gib = 24 ORDER BY ALL")  # fmt: skip
    new = rows(db, f"SELECT stack, seq_length, gpus, fits, dp, tp, pp, cp, mask, total_bytes FROM fits_on WHERE plan_version = '{plans[0][0]}' ORDER BY ALL")
    assert new == old and any(r[3] for r in new)


def test_fits_on_is_answered_a_batch_of_specs_at_a_time_with_the_same_rows(tmp_path, monkeypatch):
    """The store answers the specs that lack rows a batch at a time (limits.yaml
    `fits_on_batch_specs`), so that a first night's memory does not grow with its specs: batches
    of one spec give every row one batch of all gives, byte for byte, and each batch asks only its
    own specs (a spec's rows do not depend on the others')."""
    from speccat.catalogue.store import file

    night = store_runs.first_run(fits_on=True)
    tables = {}
    for size in (1, 100):
        monkeypatch.setitem(file.LIMITS, "fits_on_batch_specs", size)
        asked = []
        real = file.sql.load

        def load(name, asked=asked, real=real):
            if name == "steps/fits_on_batch":
                asked.append(name)
            return real(name)

        monkeypatch.setattr(file.sql, "load", load)
        db = tmp_path / f"batch-{size}.duckdb"
        publish(db, night)
        monkeypatch.setattr(file.sql, "load", real)
        tables[size] = rows(db, "SELECT * FROM fits_on ORDER BY ALL")
        specs = len({r[0] for r in tables[size]})
        assert len(asked) == (specs if size == 1 else 1)
    assert specs >= 5 and tables[1] == tables[100]


def test_a_batch_that_runs_out_of_memory_is_answered_in_halves_with_the_same_rows(tmp_path, monkeypatch):
    """A batch whose search runs out of `fits_on_memory_mib` is answered in two halves, down to
    one spec (catalogue/store/fits_on_batches.py answer_batch): the rows are those of a batch per
    spec. All the first run's specs in one batch ran out of 256 MiB on this 2-core machine; one
    spec at a time did not."""
    from speccat.catalogue.store import file

    night = store_runs.first_run(fits_on=True)
    monkeypatch.setitem(file.LIMITS, "fits_on_batch_specs", 1)
    publish(tmp_path / "one.duckdb", night)
    monkeypatch.setitem(file.LIMITS, "fits_on_batch_specs", 100)
    monkeypatch.setitem(file.LIMITS, "fits_on_memory_mib", 256)
    asked = []
    real = file.sql.load
    monkeypatch.setattr(file.sql, "load", lambda name: asked.append(name) or real(name))
    publish(tmp_path / "halved.duckdb", night)
    monkeypatch.setattr(file.sql, "load", real)
    one = rows(tmp_path / "one.duckdb", "SELECT * FROM fits_on ORDER BY ALL")
    specs = len({r[0] for r in one})
    assert 1 < asked.count("steps/fits_on_batch") <= 2 * specs - 1  # halved at least once; a binary split of n has at most 2n - 1 parts
    assert rows(tmp_path / "halved.duckdb", "SELECT * FROM fits_on ORDER BY ALL") == one
