"""bench/bench_drift.py's comparison: the table of kinds that changed between two dumps and the
exit status (1 when a kind priced under the lock stops pricing under the newest releases).
Two small dumps made by hand; no venv is built and nothing is censused."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import bench_drift as drift  # noqa: E402
from bench import __main__ as bench_main  # noqa: E402


def kind(ops=None, measured=None, priced=1000.0, ratio=1.0, status="priced"):
    return {
        "ops": ops if ops is not None else {"attMM": 4, "ffMM": 3},
        "measured": measured if measured is not None else {"attMM": 400.0, "ffMM": 600.0},
        "priced": priced,
        "ratio": ratio,
        "status": status,
    }


def refused(reason="unsupported_layer"):
    return {"ops": {}, "measured": {}, "priced": None, "ratio": None, "status": f"refused: {reason}"}


def make_dump(transformers="5.25.0", torch="2.13.0+cpu", configs=None):
    return {
        "versions": {"transformers": transformers, "torch": torch, "python": "3.11.9"},
        "distributions": {"transformers": transformers, "torch": torch, "numpy": "2.4.6"},
        "seq_length": 4096,
        "registry": False,
        "configs": configs
        if configs is not None
        else {
            "org/dense": {"decoder": kind()},
            "org/moe": {"dense": kind(), "moe": kind(ops={"attMM": 4, "ffMM": 9}, priced=3000.0)},
            "org/refused": {"*": refused()},
        },
    }


@pytest.fixture
def lock():
    return make_dump()


def test_the_same_dump_gives_an_empty_table_and_status_0(lock):
    newest = copy.deepcopy(lock)
    newest["distributions"]["plotly"] = "7.1.0"
    text, status = drift.report(lock, newest)
    assert status == 0
    assert "no kind changed" in text
    assert "distributions at other versions: none" in text and "only under the newest: plotly" in text
    assert "transformers 5.25.0, torch 2.13.0+cpu" in text


def test_measured_bytes_and_op_counts_that_change_are_listed_without_failing(lock):
    newest = make_dump(transformers="5.26.0")
    newest["configs"]["org/dense"]["decoder"] = kind(ops={"attMM": 5, "ffMM": 3}, measured={"attMM": 500.0, "ffMM": 600.0}, priced=1100.0, ratio=1.002)
    rows, stopped = drift.compare(lock, newest)
    assert stopped == []
    got = {(r["repo"], r["kind"], r["what"]): (r["lock"], r["newest"]) for r in rows}
    assert got == {
        ("org/dense", "decoder", "ops"): ("attMM 4", "attMM 5"),
        ("org/dense", "decoder", "measured"): ("attMM 400", "attMM 500"),
        ("org/dense", "decoder", "priced"): ("1000", "1100"),
        ("org/dense", "decoder", "pricing"): ("priced (1.0000)", "priced (1.0020)"),
    }
    text, status = drift.report(lock, newest)
    assert status == 0
    assert "lock:   transformers 5.25.0, torch 2.13.0+cpu" in text
    assert "newest: transformers 5.26.0, torch 2.13.0+cpu" in text
    assert "distributions at other versions: transformers 5.25.0 -> 5.26.0" in text
    assert "1 (repo, kind)s changed" in text and "STOPS PRICING" not in text


def test_a_kind_that_stops_pricing_exits_1(lock):
    newest = make_dump(torch="2.13.1+cpu")
    newest["configs"]["org/moe"] = {name: dict(row, status="unpriced: unsupported_layer", ratio=1.2) for name, row in lock["configs"]["org/moe"].items()}
    rows, stopped = drift.compare(lock, newest)
    assert stopped == [("org/moe", "dense"), ("org/moe", "moe")]
    stops = [r for r in rows if r["stops"]]
    assert [(r["kind"], r["what"], r["lock"], r["newest"]) for r in stops] == [
        ("dense", "pricing", "priced (1.0000)", "unpriced: unsupported_layer (1.2000)"),
        ("moe", "pricing", "priced (1.0000)", "unpriced: unsupported_layer (1.2000)"),
    ]
    text, status = drift.report(lock, newest)
    assert status == 1
    assert text.count("STOPS PRICING") == 2
    assert "torch 2.13.1+cpu" in text


def test_a_config_refused_under_the_newest_stops_each_of_its_kinds(lock):
    newest = make_dump()
    newest["configs"]["org/dense"] = {"*": refused("bad_value")}
    rows, stopped = drift.compare(lock, newest)
    assert stopped == [("org/dense", "decoder")]
    assert [(r["kind"], r["what"], r["lock"], r["newest"]) for r in rows] == [("decoder", "pricing", "priced (1.0000)", "refused: bad_value")]
    assert drift.report(lock, newest)[1] == 1


def test_a_config_that_starts_pricing_is_listed_and_passes(lock):
    newest = make_dump()
    newest["configs"]["org/refused"] = {"decoder": kind()}
    rows, stopped = drift.compare(lock, newest)
    assert stopped == []
    assert [(r["repo"], r["kind"], r["lock"], r["newest"]) for r in rows] == [("org/refused", "decoder", "refused: unsupported_layer", "priced (1.0000)")]
    assert drift.report(lock, newest)[1] == 0


def test_a_kind_gone_under_the_newest_stops_pricing(lock):
    newest = make_dump()
    del newest["configs"]["org/moe"]["moe"]
    rows, stopped = drift.compare(lock, newest)
    assert stopped == [("org/moe", "moe")]
    whats = [(r["kind"], r["what"], r["lock"], r["newest"]) for r in rows]
    assert ("moe", "kind", "present", "absent") in whats and ("moe", "pricing", "priced (1.0000)", "absent") in whats


def test_a_kind_unpriced_under_the_lock_that_changes_does_not_fail(lock):
    lock["configs"]["org/dense"]["decoder"]["status"] = "unpriced: unsupported_layer"
    newest = copy.deepcopy(lock)
    newest["configs"]["org/dense"]["decoder"]["status"] = "refused: unsupported_layer"
    assert drift.report(lock, newest)[1] == 0


def test_a_config_only_one_side_ran_is_not_compared(lock):
    newest = make_dump()
    newest["configs"]["registry:newtype"] = {"decoder": kind()}
    assert drift.compare(lock, newest) == ([], [])


def test_bytes_within_rounding_are_the_same(lock):
    newest = copy.deepcopy(lock)
    newest["configs"]["org/dense"]["decoder"]["measured"]["attMM"] = 400.0 * (1 + 1e-12)
    assert drift.compare(lock, newest) == ([], [])


def test_torch_requirement_is_pyprojects():
    assert drift.torch_requirement().replace(" ", "").startswith("torch>=2.13")


def test_a_plain_bench_run_leaves_drift_out(monkeypatch):
    ran = []

    def fake_import(name):
        ran.append(name)
        return type("M", (), {"main": staticmethod(lambda *a: None)})

    monkeypatch.setattr(bench_main.importlib, "import_module", fake_import)
    assert bench_main.main([]) == 0
    assert "bench.bench_drift" not in ran and "bench.bench_store" in ran
    ran.clear()
    assert bench_main.main(["drift", "--against", "x"]) == 0
    assert ran == ["bench.bench_drift"]


def test_the_copy_for_the_new_venv_holds_every_package_folder():
    files = drift.project_files()
    assert files[:2] == ["pyproject.toml", "README.md"]
    assert {"census", "catalogue", "flows", "sql"} <= set(files)
