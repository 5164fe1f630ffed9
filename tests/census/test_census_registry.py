"""transformers' causal-LM registry, each model_type censused from its default config (slow: ~3 min).

Every model_type transformers builds from its defaults gives a spec, except those
tests/support/registry_refusals.yaml lists, each with the reason code it must get; the ones transformers
cannot build are listed apart. The share of specs is printed by `python -m bench registry`.
"""

from __future__ import annotations

import pytest

from bench.bench_registry import differences, load_refusals, model_types, sweep

pytestmark = pytest.mark.slow


def test_the_refusals_file_names_registry_model_types_with_known_reasons():
    from speccat.census.spec import REASONS

    refusals, types = load_refusals(), set(model_types())
    assert set(refusals["not_buildable"]) <= types and set(refusals["refused"]) <= types
    assert not set(refusals["not_buildable"]) & set(refusals["refused"])
    for model_type, entry in refusals["refused"].items():
        assert entry["reason"] in REASONS and entry["why"], model_type


def test_the_registry_censuses_as_stated():
    rows = sweep()
    assert differences(rows, load_refusals()) == []
    crashes = [t for t, r in rows.items() if r["outcome"] == "crash" and r["buildable"]]
    assert crashes == []
