"""Norms with no weight (nanochat's RMS norm: `x * rsqrt(mean(x²) + eps)` on an fp32 copy, on the
stream and on each query and key head): such a norm keeps its fp32 input and one fp32 statistic
per row, and no normalised input for a weight to multiply (the variant `norm_weightless`; the
QK-norms one head wide, `qk_norm_per_head`, though they hold no weight to read the width from)."""

from __future__ import annotations

import pytest
from support.layer_runs import priced_vs_measured, rotary_layer_bytes

from speccat.census import run_census

SEQ = 64


def nanochat_config(**overrides) -> dict:
    from transformers import CONFIG_MAPPING

    return {**CONFIG_MAPPING["nanochat"]().to_dict(), "model_type": "nanochat", **overrides}


@pytest.fixture(scope="module")
def spec():
    return run_census(nanochat_config(), name="nanochat", seq_length=256)


def test_the_facts_of_a_weightless_norm(spec):
    facts = spec["variants"]["decoder"]
    assert facts["norm_weightless"] is True and facts["norm_upcast"] is True
    assert facts["qk_norm_per_head"] is True and facts["qk_norm_weightless"] is False  # q_norm and k_norm are modules of their own


def test_the_norms_bytes_worked_by_hand(spec):
    """Two stream norms over h = 768, each an fp32 copy (4 bytes) and one fp32 statistic; the
    q and k norms over 6 + 6 heads of 128, likewise per head."""
    h, heads, kv_heads, head_dim = 768, 6, 6, 128
    assert (spec["hidden_size"], spec["num_attention_heads"], spec["num_key_value_heads"], spec["head_dim"]) == (h, heads, kv_heads, head_dim)
    by_hand = 2 * (4 * h + 4) + (heads + kv_heads) * (4 * head_dim + 4)
    assert spec["measured"]["decoder"]["bytes_per_token"]["normOp"] == by_hand
    priced, measured = priced_vs_measured(spec, 256)["decoder"]
    assert priced == measured


def test_the_price_is_what_a_real_layer_keeps():
    """A tiny nanochat's layer run for real on CPU in bf16: the bytes it saves per token equal the
    records' price of the kind the census states for it."""
    config = nanochat_config(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_hidden_layers=2, vocab_size=256)
    spec = run_census(config, name="tiny-nanochat", seq_length=SEQ)
    priced, measured = priced_vs_measured(spec, SEQ)["decoder"]
    assert priced == measured == rotary_layer_bytes(config, SEQ)
