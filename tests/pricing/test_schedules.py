"""catalogue/records/schedules.yaml: its loader's refusals, and the micro-batches in flight on
every stage as the planner's SQL reads the file (the macro rank_stages), worked by hand from
each schedule's paper at pp 4 (the file's sources):

- 1F1B: stage i holds pp - i: 4, 3, 2, 1; ZB-H1 the same.
- interleaved, v = 2: 1F1B's times 1 + (p - 1)/(p v) = 1 + 3/8.
- ZB-H2: 2(pp - i) - 1: 7, 5, 3, 1 (the first worker's (2p - 1) of Qi et al. 2024, section 2.2).
- ZB-V: p on every worker: 4, 4, 4, 4.
- DualPipe: PP + 1 = 5 micro-batches of one stage on every rank, which holds two: 2.5.
"""

from __future__ import annotations

import contextlib

import pytest
import yaml
from support import store_runs

from speccat.catalogue.records.schedules import SCHEDULES_PATH, ScheduleError, load_schedules
from speccat.catalogue.store.file import open_readonly

REPO = "meta-llama/Llama-3.1-8B-Instruct"  # 32 layers of one kind


def test_every_schedule_names_its_source_and_the_defaults_are_1f1b_and_interleaved():
    schedules = load_schedules()
    assert list(schedules.by_name) == ["1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipe"]
    assert schedules.default(1).name == "1f1b" and schedules.default(4).name == "interleaved"
    assert all(s.source for s in schedules.by_name.values())
    assert [r["schedule"] for r in schedules.rows()] == list(schedules.by_name)


@pytest.mark.parametrize(
    "change, reason, said",
    [
        (lambda d: d["schedules"]["zb-v"].pop("folded"), "bad_value", "zb-v.chunks"),
        (lambda d: d["schedules"]["zb-h1"].update(default="single"), "bad_value", "exactly one schedule must be the single default"),
        (lambda d: d["schedules"]["1f1b"].pop("source"), "missing_key", "1f1b.source"),
        (lambda d: d["schedules"]["zb-h2"]["in_flight"].pop("constant"), "missing_key", "in_flight.constant"),
        (lambda d: d["schedules"]["dualpipe"].update(head_in_flight=0), "bad_value", "head_in_flight"),
        (lambda d: d["schedules"]["1f1b"].update(window=2), "unknown_key", "1f1b.window"),
    ],
)
def test_a_bad_schedules_file_is_refused(tmp_path, change, reason, said):
    data = yaml.safe_load(SCHEDULES_PATH.read_text())
    change(data)
    path = tmp_path / "schedules.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScheduleError) as caught:
        load_schedules(path)
    assert caught.value.reason == reason and said in str(caught.value)


@pytest.mark.parametrize(
    "schedule, vpp, flights",
    [
        ("1f1b", 1, [4, 3, 2, 1]),
        ("zb-h1", 1, [4, 3, 2, 1]),
        ("interleaved", 2, [4 * 11 / 8, 3 * 11 / 8, 2 * 11 / 8, 11 / 8]),
        ("zb-h2", 1, [7, 5, 3, 1]),
        ("zb-v", 1, [4, 4, 4, 4]),
        ("dualpipe", 1, [2.5, 2.5, 2.5, 2.5]),
        (None, 1, [4, 3, 2, 1]),  # no schedule asked: the default for vpp 1
    ],
)
def test_the_stages_in_flight_as_the_planner_reads_them(schedule, vpp, flights):
    with contextlib.closing(open_readonly(store_runs.two_night_catalogue())) as con:
        for name, value in (("repo_id", REPO), ("pp", 4), ("vpp", vpp), ("schedule", schedule)):
            con.execute(f"SET VARIABLE {name} = $value", {"value": value})
        rows = con.execute(
            """SELECT stage, any_value(in_flight_count), any_value(schedule) FROM rank_stages('rank_fits_layout')
               WHERE mask = 0 AND stack = 'transformers' AND seq_length_tokens = 4096 AND tp_ranks = 1 AND cp_ranks = 1
               GROUP BY stage ORDER BY stage"""
        ).fetchall()
    assert [r[1] for r in rows] == pytest.approx(flights)
    assert {r[2] for r in rows} == {schedule or "1f1b" if vpp == 1 else "interleaved"}


def test_a_schedule_the_layout_cannot_run_has_no_rows():
    with contextlib.closing(open_readonly(store_runs.two_night_catalogue())) as con:
        for name, value in (("repo_id", REPO), ("pp", 4), ("vpp", 2), ("schedule", "zb-h2")):
            con.execute(f"SET VARIABLE {name} = $value", {"value": value})
        assert con.execute("SELECT count(*) FROM rank_stages('rank_fits_layout')").fetchone()[0] == 0
        con.execute("SET VARIABLE vpp = 1")
        assert con.execute("SELECT count(*) FROM rank_stages('rank_fits_layout')").fetchone()[0] > 0
