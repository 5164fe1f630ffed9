"""Pricing the shipped configs through the census (speccat.census.run_census).

Every config is censused once per test process (tests/support/shipped_specs.py; about 0.1–1 s
each). The acceptance numbers of Llama-3.1-8B are derived in tests/pricing/test_pricing.py; here
they are checked on the censused spec, and the fast path is compared with the direct evaluator on
every shipped config: the whole grid for a handful, a seeded random sample of settings (every
mask) for the rest.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from conftest import repo_id_of, shipped_config_paths
from support.pricing_specs import BUILDERS

from speccat.catalogue.records.pricing import model_totals, price_layers, price_spec
from speccat.census.structure.family import family_for

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from support.hub_more import REFUSED  # noqa: E402  (the shipped configs the census refuses, with why)

REPOS = [repo_id_of(p) for p in shipped_config_paths() if repo_id_of(p) not in REFUSED]
# The whole grid, every switch set: dense GQA, hybrid linear + MoE, MLA with a q latent, MoE with
# sinks and biases, four norms with QK-norm.
WHOLE_GRID = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen3.5-35B-A3B",
    "deepseek-ai/DeepSeek-V3",
    "openai/gpt-oss-20b",
    "google/gemma-3-1b-it",
)
SAMPLED_SETTINGS = 4


@pytest.fixture(scope="module")
def censused():
    """repo_id -> its spec, censused on first use (once per test process, tests/support/shipped_specs.py)."""
    from support.shipped_specs import shipped_spec

    return shipped_spec


def test_whole_grid_configs_are_shipped():
    assert set(WHOLE_GRID) <= set(REPOS) and len(REPOS) == 50 - len(REFUSED)


def test_llama_8b_acceptance_on_the_censused_spec(censused, records, grid):
    spec = censused("meta-llama/Llama-3.1-8B-Instruct")
    one = grid.with_settings([grid.setting()])  # s=4096 b=1 tp=cp=1 bf16, flash, in_flight 1
    prices = price_layers(spec, records, one)
    everything = records.mask_of(records.switches)
    got = {p: prices.part(p)[0, 0, 0] for p in ("attention", "ffn", "norm", "total")}
    s = 4096  # per token: 28,800 attention, 122,880 ffn, 49,160 norm (tests/pricing/test_pricing.py derives them)
    assert got == {"attention": s * 28_800, "ffn": s * 122_880, "norm": s * 49_160, "total": s * 200_840}
    assert prices.total[0, 0, everything] == 419_430_400
    assert prices.full[0, 0] == 33_554_432
    model = model_totals(spec, price_spec(spec, records, one))
    totals = dict(zip(model.layer_prices.column("mask").to_pylist(), model.layer_prices.column("total").to_pylist()))
    assert (totals[0], totals[everything]) == (32 * s * 200_840, 32 * 419_430_400)
    assert model.full_prices.column("kept").to_pylist() == [32 * 33_554_432]


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_the_hand_built_specs_price_as_the_census(censused, records, grid, build):
    hand = build()
    spec = censused(hand["name"])
    assert family_for(hand["arch"]) is family_for(spec["arch"])  # the same family profile
    assert price_layers(hand, records, grid).same_bits(price_layers(spec, records, grid))


def _sample(grid, repo_id: str):
    seed = int(hashlib.sha256(repo_id.encode()).hexdigest()[:8], 16)
    picks = np.random.default_rng(seed).choice(len(grid.settings), SAMPLED_SETTINGS, replace=False)
    return grid.with_settings([grid.settings[i] for i in sorted(picks)])


@pytest.mark.parametrize("repo_id", REPOS)
def test_fast_equals_direct_on_every_shipped_config(censused, records, grid, repo_id):
    spec = censused(repo_id)
    settings = grid if repo_id in WHOLE_GRID else _sample(grid, repo_id)
    fast = price_layers(spec, records, settings, "fast")
    direct = price_layers(spec, records, settings, "direct")
    assert fast.same_bits(direct)
    assert np.all(fast.total > 0) and np.all(fast.full > 0)


@pytest.mark.parametrize("repo_id", REPOS)
def test_monotonic_in_switches_tp_and_cp(censused, records, grid, repo_id):
    spec = censused(repo_id)
    prices = price_layers(spec, records, grid)
    total = prices.total
    for bit in range(len(records.switches)):
        without = np.array([m for m in range(records.n_masks) if not m >> bit & 1])
        assert np.all(total[:, :, without | 1 << bit] <= total[:, :, without]), records.switches[bit]
    attup = 1 << records.switches.index("attUp")
    without = np.array([m for m in range(records.n_masks) if not m & attup])
    if "kv_lora_rank" not in spec:  # attUp names nothing outside MLA
        assert np.array_equal(total[:, :, without | attup], total[:, :, without])
    else:
        assert np.all(total[:, :, attup] < total[:, :, 0])
    at = {(s["seq_length"], s["tp"], s["cp"]): i for i, s in enumerate(grid.settings)}
    for (seq, tp, cp), i in at.items():
        if (seq, 2 * tp, cp) in at:
            assert np.all(total[:, at[seq, 2 * tp, cp]] <= total[:, i])
        if (seq, tp, 2 * cp) in at:
            assert np.all(total[:, at[seq, tp, 2 * cp]] <= total[:, i])
