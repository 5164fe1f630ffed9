"""The census child's memory budget (flows/isolate.py): an allocation past it fails inside the
child, which reports `memory` (the flow's `too_large`) and dies alone; the next child runs.

The hungry target is `support.hostile_corpus.hog` (tests/support/hostile_corpus.py), which holds
memory one MiB at a time and returns how many MiB it got. The flow-level consequence (a `too_large` failures row, the night goes on) is
in tests/flows/test_reliability_flow.py; the time budget's in test_refresh_isolate.py and
test_refresh_flow.py.
"""

from __future__ import annotations

import pytest

from speccat.census.intake.limits import LIMITS
from speccat.census.spec import SpecError
from speccat.flows import isolate
from speccat.flows.tasks import OUTCOME_REASONS

HOG = "support.hostile_corpus:hog"
BUDGET_MIB = 256
DEPTH = 10_000  # nested calls in C: within a main thread's 8 MiB stack, more than its forked child has grown


def test_a_child_past_its_memory_budget_is_stopped_and_reported():
    # The hog wants 4x the budget; held memory is written, so without the budget it would get
    # all 1024 MiB and return 1024.
    outcome = isolate.run(HOG, (4 * BUDGET_MIB,), time_limit=120, memory_limit=BUDGET_MIB)
    assert outcome.error == "memory", outcome
    assert f"memory budget of {BUDGET_MIB} MiB" in outcome.message and "MemoryError" in outcome.message
    assert OUTCOME_REASONS[outcome.error] == "too_large"
    # The parent is untouched and the next child starts fresh.
    assert isolate.run("operator:add", (2, 3), time_limit=60, memory_limit=BUDGET_MIB).value == 5


def test_an_error_that_hides_its_failed_allocation_at_the_budget_is_memory():
    # The child fills its budget, then fails with an error that names no allocation (CPython's
    # report of a frame it could not allocate, wrapped as census_failed, as a census under a
    # small budget once did): its address space peaked at the limit, so the budget is the cause.
    outcome = isolate.run("support.hostile_corpus:hog_then_fail", (4 * BUDGET_MIB,), time_limit=120, memory_limit=BUDGET_MIB)
    assert outcome.error == "memory", outcome
    assert OUTCOME_REASONS[outcome.error] == "too_large"
    # Far from its budget the same kind of error is what it is: an exception of the census's.
    outcome = isolate.run("support.hostile_corpus:hog_then_fail", (BUDGET_MIB // 4,), time_limit=120, memory_limit=BUDGET_MIB)
    assert outcome.value == BUDGET_MIB // 4


def test_a_child_whose_stack_grows_after_its_budget_is_spent_still_runs():
    # With its address-space budget spent to the page, the child calls DEPTH deep in C, room
    # for its objects made beforehand. On a main thread's stack, which grows on demand, the
    # growth fails past RLIMIT_AS with a SIGSEGV: the parent saw "died (exit code -11)" and a
    # night stored census_failed for a census out of memory. The child's call runs on a stack
    # mapped before the budget, so it needs no new address space and completes.
    outcome = isolate.run("support.hostile_corpus:hog_then_call_deep", (DEPTH,), time_limit=120, memory_limit=BUDGET_MIB)
    assert outcome.value == DEPTH, outcome


def test_a_child_killed_by_a_signal_at_its_budget_is_memory_and_far_from_it_a_death():
    # torch's native code can crash on an allocation that failed instead of raising (a census
    # under a 2 MiB budget died of SIGSEGV in torch's dispatch): the child cannot report, so the
    # parent judges by the child's peak address space, which it samples while it waits.
    outcome = isolate.run("support.hostile_corpus:hog_then_crash", (4 * BUDGET_MIB,), time_limit=120, memory_limit=BUDGET_MIB)
    assert outcome.error == "memory", outcome
    assert f"memory budget of {BUDGET_MIB} MiB" in outcome.message and "SIGSEGV" in outcome.message
    # The same crash a quarter of the budget in is what it is: a death.
    outcome = isolate.run("support.hostile_corpus:hog_then_crash", (BUDGET_MIB // 4,), time_limit=120, memory_limit=BUDGET_MIB)
    assert (outcome.error, outcome.message) == ("died", "the census process died (exit code -11)")


def test_a_stated_refusal_near_the_budget_keeps_its_reason():
    # A refusal with its own reason is never taken for the budget, however much memory was used.
    outcome = isolate.run("support.hostile_corpus:refuse_after_hogging", (4 * BUDGET_MIB,), time_limit=120, memory_limit=BUDGET_MIB)
    assert (outcome.error, outcome.reason) == ("spec_error", "unsupported_layer"), outcome


def test_within_its_budget_the_same_work_completes():
    # A quarter of the budget, the reserve the child frees to report in is not counted in it.
    assert isolate.run(HOG, (BUDGET_MIB // 4,), time_limit=120, memory_limit=BUDGET_MIB).value == BUDGET_MIB // 4


def test_the_budget_is_the_childs_alone():
    # The parent may hold more than the child's budget: each child is limited, not the flow.
    assert isolate.run(HOG, (2 * BUDGET_MIB,), time_limit=120, memory_limit=None).value == 2 * BUDGET_MIB


def _raised(exc: BaseException, cause: BaseException | None = None, context: BaseException | None = None) -> BaseException:
    """`exc` as raised `from cause`, or `from None` while handling `context` (build.py's way)."""
    try:
        if context is None:
            raise exc from cause
        try:
            raise context
        except BaseException:
            raise exc from None
    except BaseException as err:
        return err


def test_out_of_memory_is_recognised_through_the_census_wrapping():
    # run_census wraps an unexpected error as census_failed `from` it; build.py wraps
    # transformers' errors `from None` (the MemoryError is then the context).
    wrapped = _raised(SpecError("census_failed", "x: MemoryError"), cause=MemoryError())
    hidden = _raised(SpecError("bad_value", "config: transformers cannot build..."), context=MemoryError())
    torch_style = RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to allocate 10 bytes")
    mapped = ImportError("libarrow.so.2600: failed to map segment from shared object")
    for err in (MemoryError(), wrapped, hidden, torch_style, mapped):
        assert isolate.out_of_memory(err), err
    for err in (SpecError("census_failed", "x: KeyError: 'a'"), ValueError("memory is fine"), _raised(ValueError("v"), cause=KeyError("k"))):
        assert not isolate.out_of_memory(err), err


@pytest.mark.parametrize("memory_limit", [8, LIMITS.census_memory_mib])
def test_a_budget_does_not_change_an_answer(memory_limit):
    # A SpecError keeps its reason under any budget (it is not mistaken for memory).
    outcome = isolate.run("speccat.census.spec:ModelSpec", ({"name": "x"},), time_limit=60, memory_limit=memory_limit)
    assert (outcome.error, outcome.reason) == ("spec_error", "missing_field")


@pytest.mark.parametrize("value", ["0", "-5", "nan"])
def test_the_cli_refuses_a_budget_that_would_refuse_every_census(value, capsys):
    from speccat.flows.cli import main

    assert main(["refresh", "--memory-limit", value]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("speccat: bad_argument: --memory-limit must be a positive") and err.count("\n") == 1
