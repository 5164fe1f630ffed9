"""The shipped snapshot's configs (flows/snapshot/*/config.json) censused once per test process.

Several test files read the spec of the same shipped config: the census's own facts
(tests/census/test_census_shipped.py, test_census_hub_more.py, test_census_flops.py,
test_census_cli.py), the pricing of every shipped spec (tests/pricing/test_pricing_shipped.py)
and the store's runs (tests/support/store_runs.py). Each asks here, and a config is censused the
first time any of them does: by `run_census` with the config read from its file and the repo's
id as the name, exactly as each of them called it. (What the night measures across settings,
tests/pricing/test_priced_vs_measured.py reads from the session's night instead.) Under `make
test`'s workers the test files that name `shipped_spec` run on one worker (tests/support/workers.py),
so each config is censused once in the session, not once per worker.

A ModelSpec is read-only (its `to_dict` is a fresh copy), so sharing one cannot leak one test's
changes into another. A refusal is not kept: a refused config raises its SpecError on every call,
from a census of its own.
"""

from __future__ import annotations

import functools

from conftest import load_shipped

from speccat.census.spec import ModelSpec


@functools.cache
def shipped_spec(repo_id: str) -> ModelSpec:
    """The census of the shipped config of `repo_id` at the default sequence length, named `repo_id`."""
    from speccat.census import run_census

    return run_census(load_shipped(repo_id), name=repo_id)
