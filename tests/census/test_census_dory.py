"""dory's layer (nGPT on the unit sphere): its learned per-channel scales, vectors computed from
parameters alone, multiply activations, and each product keeps its activation factor
(census/measure/stream_scales.py):

- q after rope times sqk², inside the attention (attn_scaled_kept: heads × head_dim a token);
- its MLP's gate_proj and up_proj outputs times suv_gate and suv_up (ff_scaled_kept: 2 tensors
  of the MLP's width);
- the residual's move towards each branch's output, abs(λ·scale) · (out − h), in the layer's own
  code (stream_scale_attn_bytes, stream_scale_ff_bytes: the bf16 difference, 2 bytes a channel);
- its output gate, sigmoid(gate_proj(x) · s_gate²), whose product reaches o_proj through
  attn_sub_norm (census/measure/output_gates.py norm_returned): the gate keeps gate_proj's output
  (its scale's product) and the sigmoid's output (attn_gate_kept: 2 × head_dim per head).

The default's bytes are worked by hand from its dims, a tiny layer's against a real CPU forward
and backward, and the price against the census; a llama states none of them, nor an RWKV layer, whose
token mixes' products with time_mix are its mixer's own records'.
"""

from __future__ import annotations

import pytest
from bench.bench_registry import default_config as default
from support.layer_runs import priced_vs_measured, rotary_layer_bytes

from speccat.census import run_census

BF16, FP32 = 2, 4
SEQ = 32
FACTS = ("attn_scaled_kept", "ff_scaled_kept", "stream_scale_attn_bytes", "stream_scale_ff_bytes", "attn_gate_width", "attn_gate_kept")
TINY = dict(
    hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=128,
    num_hidden_layers=3, n_input_layers=1, n_recurrent_layers=1, n_output_layers=1, layer_types=["full_attention"] * 3,
)


def facts(spec, kind: str) -> dict[str, int]:
    return {name: int(spec["variants"][kind][name]) for name in FACTS}


def one_call(h: int, a: int, dh: int, ff: int, s: int) -> dict[str, float]:
    """What one call of dory's layer keeps per token, by hand, where its scales' products keep
    more than a llama-like layer's ops (bf16 compute, flash kernel, s tokens)."""
    heads = a * dh
    return {
        # q/k/v/gate_proj's input (the input norm's bf16 output); o_proj's input (attn_sub_norm's
        # output); q after rope, which its product with sqk² keeps; gate_proj's output, which its
        # product with s_gate² keeps, and the sigmoid's output, which the gate's product keeps;
        # the residual's (out − h), which its product with abs(λ₁·scale) keeps; and once a layer
        # (over the tokens), the scales: λ₁·scale and its abs (h each), sqk·scale and its
        # square, s_gate·scale and its square (the heads' width each)
        "attMM": BF16 * (h + heads + heads + 2 * heads + h) + BF16 * (2 * h + 4 * heads) / s,
        # the MLP's input (the pre-feed-forward norm's output); ffn_sub_norm's output down_proj
        # reads; the SiLU's output and up's scaled output, which their product keeps; gate_proj's
        # and up_proj's outputs, which their products with suv_gate and suv_up keep; the
        # residual's (out − h); and once a layer, abs(λ₂·scale) and λ₂·scale, suv_gate and suv_up
        # times their factor
        "ffMM": BF16 * (h + 3 * ff + 2 * ff + h) + BF16 * (2 * h + 2 * ff) / s,
    }


@pytest.fixture(scope="module")
def dory():
    return run_census(default("dory"), name="dory", seq_length=256).to_dict()


@pytest.fixture(scope="module")
def tiny():
    config = default("dory", **TINY)
    return config, run_census(config, name="tiny-dory", seq_length=SEQ).to_dict()


def test_dory_default_worked_by_hand(dory):
    """dory's defaults: h 2560, 16 query heads of 256, an MLP 7168 wide; per token at 256 tokens."""
    h, a, dh, ff, s = 2560, 16, 256, 7168, 256
    for kind in ("sliding_dense", "full_dense"):
        assert facts(dory, kind) == dict(
            attn_scaled_kept=a * dh, ff_scaled_kept=2, stream_scale_attn_bytes=BF16, stream_scale_ff_bytes=BF16, attn_gate_width=dh, attn_gate_kept=2 * dh,
        )
        cycles = dory["variants"][kind]["recurrent_cycles"]
        measured = dory["measured"][kind]["bytes_per_token"]
        by_hand = one_call(h, a, dh, ff, s)
        assert {op: measured[op] for op in by_hand} == {op: cycles * n for op, n in by_hand.items()}
        priced, total = priced_vs_measured(dory, s)[kind]
        # what is left: the scales, once a layer (no token dimension), which no record prices
        unpriced = cycles * BF16 * (4 * h + 4 * a * dh + 2 * ff) / s
        assert priced == pytest.approx(total - unpriced, rel=1e-9)


def test_a_tiny_layer_keeps_what_the_census_measured(tiny):
    """A tiny dory built with real bf16 weights on CPU: one call of its layer, forward and
    backward, keeps what the census measured for one call, and the facts price it but for the
    scales kept once a layer."""
    config, spec = tiny
    (kind,) = spec["measured"]
    h, a, dh, ff = (config[k] for k in ("hidden_size", "num_attention_heads", "head_dim", "intermediate_size"))
    assert facts(spec, kind) == dict(
        attn_scaled_kept=a * dh, ff_scaled_kept=2, stream_scale_attn_bytes=BF16, stream_scale_ff_bytes=BF16, attn_gate_width=dh, attn_gate_kept=2 * dh,
    )
    cycles = spec["variants"][kind]["recurrent_cycles"]
    measured = spec["measured"][kind]["bytes_per_token"]
    assert sum(measured.values()) == pytest.approx(cycles * rotary_layer_bytes(config, SEQ), rel=1e-9)
    by_hand = one_call(h, a, dh, ff, SEQ)
    assert {op: measured[op] for op in by_hand} == {op: cycles * n for op, n in by_hand.items()}
    priced, total = priced_vs_measured(spec, SEQ)[kind]
    assert priced == pytest.approx(total - cycles * BF16 * (4 * h + 4 * a * dh + 2 * ff) / SEQ, rel=1e-9)


@pytest.mark.parametrize(
    "config",
    [
        default("llama", hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1, vocab_size=128),
        # RWKV's token mixes multiply the hidden states and their shifted copy by time_mix and
        # 1 − time_mix, products with a parameter and with a tensor computed from it that keep
        # their factors: its time mixing's own records price them (token_mixes), no attention's
        default("rwkv", hidden_size=64, attention_hidden_size=48, intermediate_size=160, num_hidden_layers=1, vocab_size=128, context_length=64),
    ],
    ids=["llama", "rwkv"],
)
def test_a_layer_without_them_states_none(config):
    """A layer without such scales (llama), or whose products with them are its mixer's own (rwkv):
    every fact 0, and the price still the measurement."""
    spec = run_census(config, name="tiny", seq_length=SEQ).to_dict()
    for kind in spec["measured"]:
        assert set(facts(spec, kind).values()) == {0}, kind
        priced, measured = priced_vs_measured(spec, SEQ)[kind]
        assert priced == pytest.approx(measured, rel=1e-9), kind
