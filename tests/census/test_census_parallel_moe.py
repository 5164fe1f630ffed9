"""A parallel block whose feed-forward is an MoE (cohere2_moe: the attention and the MoE read
one normalised input): the router's projection (and shared experts, where there are any) read
the storage the attention's projections keep already, so the MoE keeps no input of its own
(`ff_input_shared`, as a dense parallel block's MLP)."""

from __future__ import annotations

import pytest
from support.layer_runs import priced_vs_measured

from speccat.census import run_census


@pytest.fixture(scope="module")
def spec():
    from bench.bench_registry import default_config

    return run_census(default_config("cohere2_moe"), name="cohere2_moe", seq_length=256).to_dict()


def test_the_moe_reads_the_attentions_input(spec):
    assert {kind: facts["ff_input_shared"] for kind, facts in spec["variants"].items()} == {"sliding_moe": True, "full_moe": True}
    # within per-layer constants no record prices, the largest the LayerNorm's fp32 copy of its
    # weight (one per layer, not per token: 8,192 × 4 bytes, 128 a token at 256)
    for priced, measured in priced_vs_measured(spec, 256).values():
        assert 128 <= measured - priced <= 132


def test_the_input_is_priced_once(spec):
    """Read as not shared, each kind would price the router's bf16 input, one hidden width
    (8,192) of 2 bytes per token, a second time."""
    apart = dict(spec, variants={kind: dict(facts, ff_input_shared=False) for kind, facts in spec["variants"].items()})
    shared, separate = priced_vs_measured(spec, 256), priced_vs_measured(apart, 256)
    assert spec["hidden_size"] == 8192
    assert {kind: separate[kind][0] - shared[kind][0] for kind in shared} == {"sliding_moe": 8192 * 2, "full_moe": 8192 * 2}
