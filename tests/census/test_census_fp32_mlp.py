"""beam's MLP in fp32 and its output gate with a bias per head (act_saved_fp32, ff_kept_fp32;
experts_act_fp32, experts_kept_fp32; attn_gate_width through a bias). Its dense MLP and its
routed experts compute act_fn(gate.float()) * up.float() and cast the product back for the down
projection: the activation keeps its fp32 input, the product its fp32 factors, down the bf16
cast. Its attention gate adds a parameter (one bias
per head) to gate_proj's output before the sigmoid: the gate's chain goes through an op whose
other operand is the same for every token (census/measure/output_gates.py)."""

from __future__ import annotations

import pytest
from bench.bench_registry import default_config as default
from support.layer_runs import priced_vs_measured, rotary_layer_bytes

from speccat.census import run_census

SEQ = 64
BF16, FP32 = 2, 4
TINY = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_hidden_layers=2, vocab_size=256)



def tiny_beam(**overrides) -> dict:
    """Two dense layers of beam's local attention (its full-attention layers run without rotary:
    the real run below is of a rotary layer)."""
    return default("beam", **TINY, layer_types=["sliding_attention"] * 2, mlp_layer_types=["dense"] * 2, **overrides)


def facts_of(spec, kind: str) -> tuple[int, int, int, int]:
    facts = spec["variants"][kind]
    return facts["attn_gate_width"], facts["attn_gate_kept"], facts["act_saved_fp32"], facts["ff_kept_fp32"]


@pytest.fixture(scope="module")
def beam():
    return run_census(default("beam"), name="beam", seq_length=256).to_dict()


def test_beams_dense_layer_worked_by_hand(beam):
    """beam's dense layers (h 5120, 48 heads of 128, MLP 20480 wide, SiLU): attMM keeps the
    projections' input (2·h), the gated product o_proj reads (48·128 bf16) and the sigmoid's
    output of the biased gate, one per head channel (48·128 bf16); the MLP keeps its input
    (2·h), SiLU's output and up's output in fp32 (the product's factors), the bf16 product cast
    back (down_proj's input), and SiLU's fp32 input (ffAct)."""
    h, heads, head_dim, ff = 5120, 48, 128, 20480
    assert (beam["hidden_size"], beam["num_attention_heads"], beam["head_dim"], beam["intermediate_size"]) == (h, heads, head_dim, ff)
    assert facts_of(beam, "full_dense") == (head_dim, head_dim, 1, 2)
    measured = beam["measured"]["full_dense"]["bytes_per_token"]
    assert measured["attMM"] == BF16 * h + BF16 * heads * head_dim + BF16 * heads * head_dim
    assert measured["ffMM"] == BF16 * h + 2 * FP32 * ff + BF16 * ff
    assert measured["ffAct"] == FP32 * ff
    priced, total = priced_vs_measured(beam, 256)["full_dense"]
    assert priced == total


@pytest.mark.parametrize(
    ("model_type", "config", "facts"),
    [("beam", tiny_beam(), (32, 32, 1, 2)), ("llama", default("llama", **TINY), (0, 0, 0, 0))],
    ids=["beam", "llama-without"],
)
def test_the_price_is_what_a_real_layer_keeps(model_type, config, facts):
    """A tiny model's layer 0 run for real on CPU in bf16: the bytes it saves per token equal what
    the census measured and the records' price of its kind."""
    spec = run_census(config, name=f"tiny-{model_type}", seq_length=SEQ).to_dict()
    (kind,) = {group["kind"] for group in spec["layers"]}
    assert facts_of(spec, kind) == facts
    priced, measured = priced_vs_measured(spec, SEQ)[kind]
    assert priced == measured == rotary_layer_bytes(config, SEQ)


def test_a_gate_bias_no_longer_hides_the_gate():
    """Read without the bias (the chain broken at the add), the gate would be no gate: the
    records would price neither the product o_proj reads nor the sigmoid's output, 2·a·d bf16
    short of what the layer keeps."""
    spec = run_census(tiny_beam(), name="tiny-beam", seq_length=SEQ).to_dict()
    (kind,) = {group["kind"] for group in spec["layers"]}
    facts = spec["variants"][kind]
    ungated = dict(spec, variants={kind: dict(facts, attn_gate_width=0, attn_gate_kept=0)})
    heads, head_dim = TINY["num_attention_heads"], TINY["head_dim"]
    assert priced_vs_measured(spec, SEQ)[kind][0] - priced_vs_measured(ungated, SEQ)[kind][0] == 2 * BF16 * heads * head_dim


def test_beams_routed_experts_worked_by_hand(beam):
    """beam's MoE layers (256 experts of 2560, 8 chosen a token) run the same gate function per
    slot: per chosen expert a token keeps SiLU's fp32 input (ffAct, the bf16 gate_up output is
    not kept), SiLU's output and up's output in fp32 and the bf16 product (ffMM). The experts'
    grouped matmuls also keep one int32 offset per expert a layer call, which no record prices:
    256·4 bytes over the 256 tokens, 4 a token here, 0.25 at the census's 4096."""
    chosen, ff, experts, tokens = 8, 2560, 256, 256
    for kind in ("sliding_moe", "full_moe"):
        facts = beam["variants"][kind]
        assert (facts["experts_act_fp32"], facts["experts_kept_fp32"]) == (1, 2)
        assert (facts["act_saved_fp32"], facts["ff_kept_fp32"]) == (0, 0)
        measured = beam["measured"][kind]["bytes_per_token"]
        assert measured["ffAct"] == chosen * FP32 * ff
        priced, total = priced_vs_measured(beam, tokens)[kind]
        assert total - priced == experts * 4 / tokens
    assert (beam["variants"]["full_dense"]["experts_act_fp32"], beam["variants"]["full_dense"]["experts_kept_fp32"]) == (0, 0)


def test_experts_in_the_compute_dtype_state_no_fp32():
    """An MoE whose experts run their gate function in bf16 (qwen3_moe) states neither fact."""
    spec = run_census(default("qwen3_moe"), name="qwen3_moe", seq_length=256).to_dict()
    for kind, facts in spec["variants"].items():
        assert (facts["experts_act_fp32"], facts["experts_kept_fp32"], facts["act_saved_fp32"], facts["ff_kept_fp32"]) == (0, 0, 0, 0), kind
