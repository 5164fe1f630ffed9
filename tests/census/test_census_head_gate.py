"""Attention output gates of any width and activation (attn_gate_width, attn_gate_kept,
attn_gate_kept_fp32): lfm3's sigmoid of g_proj, one gate per head; laguna's softplus of g_proj
computed in fp32, one per head (or one per head channel with gating "per-element"). The census
reads each gate's width and what its ops keep, by dtype, off what ran, and the records price it:
the product o_proj reads and the gate's saves, each divided over tensor-parallel ranks with the
heads."""

from __future__ import annotations

import pytest
from bench.bench_registry import default_config as default
from support.layer_runs import priced_vs_measured, rotary_layer_bytes

from speccat.census import run_census

SEQ = 64
TINY = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_hidden_layers=2, vocab_size=256)



def tiny_lfm3(**overrides) -> dict:
    return default("lfm3", **TINY, layer_types=["full_attention"] * 2, pad_token_id=0, bos_token_id=1, eos_token_id=2, **overrides)


def tiny_laguna(**overrides) -> dict:
    more = dict(layer_types=["full_attention"] * 2, mlp_layer_types=["dense"] * 2, num_attention_heads_per_layer=[4, 4])
    return default("laguna", **TINY, **more, **overrides)


def gate_facts(spec, kind: str) -> tuple[int, int, int]:
    facts = spec["variants"][kind]
    return facts["attn_gate_width"], facts["attn_gate_kept"], facts["attn_gate_kept_fp32"]


def priced_at_census_point(spec) -> bool:
    """The records' price over what the census measured, at the census's point, is 1 within 0.001
    for every kind and end (the records' tolerance is 0.02)."""
    from bench.bench_registry import worst_ratio

    return abs(worst_ratio(spec) - 1) < 0.001


@pytest.fixture(scope="module")
def lfm3():
    return run_census(default("lfm3"), name="lfm3", seq_length=256)


@pytest.fixture(scope="module")
def laguna():
    return run_census(default("laguna"), name="laguna", seq_length=256)


def test_lfm3s_gate_per_head_worked_by_hand(lfm3):
    """lfm3's attention layers (h 2048, 16 heads of 128): attMM keeps the projections' input
    (2·h bytes), the product o_proj reads (16·128 bf16) and the sigmoid's output, one per head
    (16 bf16), which the product reads too; flash's output needs no copy (o_copy 0)."""
    h, heads, head_dim = 2048, 16, 128
    assert (lfm3["hidden_size"], lfm3["num_attention_heads"], lfm3["head_dim"]) == (h, heads, head_dim)
    assert lfm3["attn_output_gate"] is True
    for kind in ("full_dense", "sliding_dense"):
        assert gate_facts(lfm3, kind) == (1, 1, 0)
        assert lfm3["measured"][kind]["bytes_per_token"]["attMM"] == 2 * h + 2 * heads * head_dim + 2 * heads
    assert gate_facts(lfm3, "short_conv_dense") == (0, 0, 0)
    assert priced_at_census_point(lfm3)


def test_laguna_softplus_gate_in_fp32_worked_by_hand(laguna):
    """laguna's attention (h 2048, 48 heads of 128): attMM keeps the projections' input (2·h),
    the copy of flash's heads-major output the product reads (48·128 bf16), the product o_proj
    reads (48·128 bf16), softplus's fp32 input (one per head, 4 bytes) and the gate cast back to
    bf16 that the product reads (one per head, 2 bytes)."""
    h, heads, head_dim = 2048, 48, 128
    assert (laguna["hidden_size"], laguna["num_attention_heads"], laguna["head_dim"]) == (h, heads, head_dim)
    for kind in ("full_dense", "full_moe"):
        assert gate_facts(laguna, kind) == (1, 1, 1)
        assert laguna["variants"][kind]["q_heads_major"] is True
        by_hand = 2 * h + 2 * heads * head_dim + 2 * heads * head_dim + (4 + 2) * heads
        assert laguna["measured"][kind]["bytes_per_token"]["attMM"] == by_hand
    assert priced_at_census_point(laguna)


@pytest.mark.parametrize(
    ("config", "facts"),
    [
        (tiny_lfm3(), (1, 1, 0)),  # a sigmoid per head: its bf16 output
        (tiny_laguna(), (1, 1, 1)),  # a softplus per head in fp32: its fp32 input, the bf16 gate
        (tiny_laguna(gating="per-element"), (32, 32, 32)),  # the same per head channel: head_dim wide
        (tiny_lfm3(use_attention_gate=False), (0, 0, 0)),  # no gate
    ],
    ids=["lfm3", "laguna", "laguna-per-element", "lfm3-ungated"],
)
def test_the_price_is_what_a_real_gated_layer_keeps(config, facts):
    """A tiny model's layer 0 run for real on CPU in bf16: the bytes it saves per token equal what
    the census measured and the records' price of its kind."""
    spec = run_census(config, name=f"tiny-{config['model_type']}", seq_length=SEQ)
    (kind,) = {group["kind"] for group in spec["layers"]}
    assert gate_facts(spec, kind) == facts
    assert spec["attn_output_gate"] is (facts[0] > 0)
    priced, measured = priced_vs_measured(spec, SEQ)[kind]
    assert priced == measured == rotary_layer_bytes(config, SEQ)


@pytest.mark.parametrize(("model_type", "kind"), [("dots3_note_text", "full_dense"), ("bailing_hybrid", "full_moe")])
def test_a_gate_on_the_kernels_own_layout_is_no_second_tensor(model_type, kind):
    """dots3_note's and bailing_hybrid's MLA kernels leave their output heads-major (q was built
    by cat), and the gate multiplies that output before the token-major copy o_proj reads: the
    copy (o_copy's) is made from the product, so the heads' width is kept once, not twice. Read
    as multiplying o_proj's input itself, the kind would price a second a·dv bf16 tensor."""
    spec = run_census(default(model_type), name=model_type, seq_length=256).to_dict()
    facts = spec["variants"][kind]
    assert facts["attn_gate_before_copy"] is True and facts["attn_gate_width"] == 1 and facts["q_heads_major"] is True
    assert priced_at_census_point(spec)
    after = dict(spec, variants=dict(spec["variants"], **{kind: dict(facts, attn_gate_before_copy=False)}))
    heads, head_width = spec["num_attention_heads"], spec["v_head_dim"]
    assert priced_vs_measured(after, 256)[kind][0] - priced_vs_measured(spec, 256)[kind][0] == heads * head_width * 2


def test_a_gate_after_the_copy_is_a_tensor_of_its_own():
    """Qwen3-Next's attention copies its heads-major output token-major first, then multiplies
    the copy by the gate: o_proj keeps the product and the multiply keeps the copy."""
    spec = run_census(default("qwen3_next"), name="qwen3_next", seq_length=256).to_dict()
    facts = spec["variants"]["full_attention"]
    assert facts["q_heads_major"] is True and facts["attn_gate_before_copy"] is False and facts["attn_gate_width"] == spec["head_dim"]
    assert priced_at_census_point(spec)
