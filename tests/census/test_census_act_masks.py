"""An activation written as a Python chain with a `where` (apertus' xIELU: x > 0 picks
alpha_p·x² + beta·x or (expm1(min(x, eps)) − x)·alpha_n + beta·x, its alphas softplus'd from
per-layer parameters) keeps its bf16 tensors (`act_saved`), the where's bool condition
(`act_masks`, one byte an element) and per-layer scalars, which are no tensor of the tokens."""

from __future__ import annotations

import pytest
from support.layer_runs import priced_vs_measured, rotary_layer_bytes

from speccat.census import run_census

SEQ = 64


def apertus_config(**overrides) -> dict:
    from transformers import CONFIG_MAPPING

    return {**CONFIG_MAPPING["apertus"]().to_dict(), "model_type": "apertus", **overrides}


@pytest.fixture(scope="module")
def spec():
    return run_census(apertus_config(), name="apertus", seq_length=256)


def test_the_chain_keeps_four_bf16_tensors_and_one_mask(spec):
    """x (read by the products and by min), alpha_p·x (the square's other factor), expm1's output
    and expm1 − x (alpha_n's product), all bf16, and the condition x > 0: 4 × 2 + 1 bytes an
    element of the MLP's width, 14,336 in the default config; and the two softplus'd alphas, one
    bf16 scalar each a layer, which the records do not price (4 bytes a layer)."""
    facts = spec["variants"]["decoder"]
    assert (facts["act_saved"], facts["act_masks"]) == (4, 1)
    assert spec["intermediate_size"] == 14336
    assert spec["measured"]["decoder"]["bytes_per_token"]["ffAct"] * 256 == 256 * 14336 * (4 * 2 + 1) + 2 * 2
    priced, measured = priced_vs_measured(spec, 256)["decoder"]
    assert priced * 256 == measured * 256 - 2 * 2


def test_one_torch_op_keeps_no_mask():
    from transformers import CONFIG_MAPPING

    llama = run_census({**CONFIG_MAPPING["llama"]().to_dict(), "model_type": "llama"}, name="llama", seq_length=256)
    assert (llama["variants"]["decoder"]["act_saved"], llama["variants"]["decoder"]["act_masks"]) == (1, 0)


def test_the_price_is_what_a_real_layer_keeps():
    """A tiny apertus layer run for real on CPU in bf16: the bytes it saves are what the census
    measured, and the records' price of its kind less the alphas' two bf16 scalars."""
    config = apertus_config(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_hidden_layers=2, vocab_size=256)
    spec = run_census(config, name="tiny-apertus", seq_length=SEQ)
    priced, measured = priced_vs_measured(spec, SEQ)["decoder"]
    real = rotary_layer_bytes(config, SEQ)
    assert measured == real and priced * SEQ == real * SEQ - 2 * 2
