"""axk2's layers: stream norms with a sigmoid gate on their output (AXK2GatedRMSNorm:
y = RMSNorm(x), y·sigmoid(fc2(silu(fc1(y))).float()); `norm_gates`, `norm_gate_rank`,
`norm_gate_fp32`), whose fp32 product is no weight's (the inner RMS norm applies its weight in
bf16: `norm_scale_fp32` false, which the final norm's end is priced by too), and MLA whose q
up-projection reads the q latent norm's output concatenated with the latent before it
(`q_up_concat`). The bytes by hand from the tiny config's dims, and against a real CPU forward and
backward of the whole decoder; a model without the quirks (deepseek_v3) states none.
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import priced_vs_measured, saves_by_layer, tiny_model

from speccat.census import run_census

BF16, FP32 = 2, 4
H, HEADS, S = 64, 4, 32  # hidden, heads, tokens
DQ, DKV, RANK = 16, 8, 4  # q and kv latent ranks, the norm gates' bottleneck
TINY_AXK2 = {
    "model_type": "axk2", "hidden_size": H, "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
    "intermediate_size": 96, "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "n_shared_experts": 1, "q_lora_rank": DQ, "kv_lora_rank": DKV, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": 8, "head_dim": 8, "index_topk": 8, "index_head_dim": 16, "index_n_heads": 2,
    "gated_norm_rank": RANK, "num_hidden_layers": 2, "mlp_layer_types": ["dense", "sparse"], "vocab_size": 128,
    "n_group": None, "topk_group": None, "torch_dtype": "bfloat16",
}  # fmt: skip

# One RMS norm of `width` that upcasts and applies its weight in bf16: its fp32 input, an fp32
# rstd, and the bf16 normalised input the weight multiplies.
def _rms(width: int) -> int:
    return FP32 * width + FP32 + BF16 * width


# What a sigmoid gate on a stream norm's output keeps beyond the norm: y (bf16, the gate MLP's
# input and the product's factor), the sigmoid's fp32 output, fc2's input (normOp's), and the
# SiLU's input (ffAct's), RANK wide.
GATE_NORM, GATE_ACT = BF16 * H + FP32 * H + BF16 * RANK, BF16 * RANK
LATENT_NORMS = _rms(DQ) + _rms(DKV)  # MLA's q and kv latent norms


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY_AXK2, name="tiny-axk2", seq_length=S)


def _kinds(spec) -> list[str]:
    return [group["kind"] for group in spec["layers"] for _ in range(group["count"])]


def test_the_gated_stream_norms_are_stated_and_priced(spec):
    dense, moe = _kinds(spec)
    for kind, gates in ((dense, 1), (moe, 2)):
        facts = spec["variants"][kind]
        assert (facts["norm_gates"], facts["norm_gate_rank"], facts["norm_gate_fp32"]) == (gates, RANK, True)
        # the inner norm's ops, not the gate's fp32 product: the weight applied in bf16
        assert (facts["norm_upcast"], facts["norm_scale_fp32"], facts["norm_fp32_extra"]) == (True, False, 0)
        assert facts["q_up_concat"] == 1
    measured = {kind: spec["measured"][kind]["bytes_per_token"] for kind in (dense, moe)}
    # the dense layer: a gated input norm, a plain post-attention norm; the MoE layer: both gated
    assert measured[dense]["normOp"] == 2 * _rms(H) + GATE_NORM + LATENT_NORMS
    assert measured[moe]["normOp"] == 2 * _rms(H) + 2 * GATE_NORM + LATENT_NORMS
    # the dense MLP's SiLU keeps its input (one tensor a call: act_saved 1), beside the gate's
    assert spec["variants"][dense]["act_saved"] == 1
    assert measured[dense]["ffAct"] == BF16 * 96 + GATE_ACT
    # (the MoE layer keeps 0.5 B per token the records leave out: the experts' int32 token
    # counts, one per expert and layer call)
    for kind, (priced, got) in priced_vs_measured(spec, S).items():
        assert priced == pytest.approx(got, abs=0.5), kind


def test_the_q_latents_concatenated_are_kept_by_the_up_projection(spec):
    """q_gate_proj reads [q_resid, q_compressed] (2·q_lora_rank): one more latent than
    DeepSeek's q_b_proj keeps, booked to the attention's child."""
    dense, _ = _kinds(spec)
    heads_v = HEADS * 8
    # the projections' input (the gated norm's bf16 output), the concatenated latents, kv_b_proj's
    # input (the kv latent norm's output), the kernel's output made token-major (o_copy) and the
    # fp32 sigmoid of the output gate, and the product o_proj reads
    expected = BF16 * H + BF16 * 2 * DQ + BF16 * DKV + BF16 * heads_v + FP32 * heads_v + BF16 * heads_v
    assert spec["measured"][dense]["bytes_per_token"]["attMM"] == expected


def test_the_final_norm_end_is_priced_as_its_plain_rms_norm(spec):
    from speccat.catalogue.records import points
    from speccat.flows.analysis import pricing_inputs

    records, grid, _, ends = pricing_inputs()
    rows = {row["kind"]: row["priced_per_token"] for row in points.price_ends(spec, records, grid, ends)}
    measured = points.measured_per_token(spec)
    assert measured[("end:final_norm", "census")] == _rms(H)
    assert rows["end:final_norm"] == pytest.approx(_rms(H), rel=1e-9)


def test_every_layer_books_what_a_real_run_keeps(spec):
    """A real bf16 forward and backward of the whole tiny decoder on CPU, its attention through
    speccat's kernel and its experts as the census runs them: per layer, the bytes of the storages
    saved while it ran, the parameters, buffers, its inputs other than its hidden states and its
    output left out, as the census leaves them out."""
    from speccat.census.describe.feed_forward_facts import EXPERTS_IMPL
    from speccat.census.kernels.attention import ATTENTION_IMPL, register

    register()
    model = tiny_model({**TINY_AXK2, "attn_implementation": ATTENTION_IMPL}, torch.bfloat16)
    model.set_experts_implementation(EXPERTS_IMPL)
    saved, given, fixed = saves_by_layer(model, S)
    real, left = [0, 0], fixed | {t.untyped_storage()._cdata for inputs in given.values() for t in inputs}
    for key, (index, t) in saved.items():
        if key not in left:
            real[index] += t.untyped_storage().nbytes()
    for index, kind in enumerate(_kinds(spec)):
        assert sum(spec["measured"][kind]["bytes_per_token"].values()) * S == real[index], kind


def test_a_model_without_the_quirks_states_none():
    """deepseek_v3: plain stream norms, q_b_proj reading the q latent norm's output alone."""
    from transformers import CONFIG_MAPPING

    config = {
        **CONFIG_MAPPING["deepseek_v3"]().to_dict(), "model_type": "deepseek_v3", "hidden_size": H,
        "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "intermediate_size": 96, "moe_intermediate_size": 16,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "q_lora_rank": DQ,
        "kv_lora_rank": DKV, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8, "head_dim": 8, "num_hidden_layers": 2,
        "first_k_dense_replace": 1, "vocab_size": 128,
    }  # fmt: skip
    spec = run_census(config, name="tiny-deepseek-v3", seq_length=S)
    for kind, facts in spec["variants"].items():
        assert (facts["norm_gates"], facts["norm_gate_rank"], facts["norm_gate_fp32"], facts["q_up_concat"]) == (0, 0, False, 0), kind
    for kind, (priced, got) in priced_vs_measured(spec, S).items():
        assert priced == pytest.approx(got, rel=0.02), kind
