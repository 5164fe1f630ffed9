"""flows/isolate.py: one call in a forked child that is stopped at its time limit.

The targets are stdlib functions and the ModelSpec constructor, so these tests show the
sandbox itself: values come back, a SpecError keeps its reason, a hang is killed at its limit
without holding up the next call, and a child that dies is reported, never raised.
"""

from __future__ import annotations

import os
import time

from speccat.flows import isolate


def test_a_value_comes_back_from_a_child_process():
    outcome = isolate.run("os:getpid", (), time_limit=60)
    assert outcome.ok
    assert outcome.value != os.getpid()  # it ran elsewhere


def test_each_call_gets_a_fresh_process():
    # Process-global state set by one call (here the environment) is gone in the next one:
    # what the census does to torch's default dtype and dispatch modes cannot leak either.
    assert isolate.run("os:putenv", ("SPECCAT_ISOLATE_PROBE", "set"), time_limit=60).ok
    assert isolate.run("os:getenv", ("SPECCAT_ISOLATE_PROBE",), time_limit=60).value is None


def test_a_spec_error_keeps_its_reason():
    outcome = isolate.run("speccat.census.spec:ModelSpec", ({"name": "x"},), time_limit=60)
    assert (outcome.error, outcome.reason) == ("spec_error", "missing_field")
    assert "arch" in outcome.message or "hidden_size" in outcome.message


def test_another_exception_is_reported_with_its_type_and_place():
    outcome = isolate.run("json:loads", ("{not json",), time_limit=60)
    assert outcome.error == "exception"
    assert outcome.message.startswith("JSONDecodeError: ")
    assert "(at decoder.py:" in outcome.message


def test_a_hang_is_stopped_at_its_limit_and_the_next_call_still_runs():
    started = time.monotonic()
    outcome = isolate.run("time:sleep", (120,), time_limit=1.0)
    waited = time.monotonic() - started
    assert outcome.error == "timeout"
    assert "time limit of 1 s" in outcome.message
    assert waited < 60  # killed, not waited out (the sleep was 120 s)
    assert isolate.run("operator:add", (2, 3), time_limit=60).value == 5


def test_a_child_that_dies_is_reported_with_its_exit_code():
    outcome = isolate.run("os:_exit", (3,), time_limit=60)
    assert outcome.error == "died"
    assert "exit code 3" in outcome.message


def test_a_result_that_cannot_be_sent_back_is_an_error():
    outcome = isolate.run("threading:Lock", (), time_limit=60)
    assert outcome.error == "exception"
    assert "could not be sent back" in outcome.message
