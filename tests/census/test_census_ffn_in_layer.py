"""A feed-forward written in the layer's own forward: bart's decoder layer holds fc1, its activation
(activation_fn, an ACT2FN module) and fc2 as its own children, beside a cross-attention that does
not run on a causal input (no encoder states). The census counts two projections and one
activation call, books what the activation keeps to ffAct, and the records price it exactly.
"""

from __future__ import annotations

import torch
from support.layer_runs import saved_by_layer

from speccat.catalogue.records.points import measured_per_token, price_points
from speccat.census import run_census

BF16, FP32 = 2, 4

# the tiny layer states bart's decoder sizes (the census builds the causal LM at the decoder_*
# fields the config states: docs/census.md), so the real model below is the layer the census builds.
H, HEADS, W, SEQ = 64, 16, 4096, 32
TINY_BART = {
    "model_type": "bart", "d_model": H, "decoder_attention_heads": HEADS, "decoder_ffn_dim": W,
    "vocab_size": 128, "max_position_embeddings": 128, "dropout": 0.0, "attention_dropout": 0.0,
    "activation_dropout": 0.0, "activation_function": "gelu",
}  # fmt: skip


def test_a_feed_forward_of_the_layers_own_children_is_counted_and_booked():
    """Ops, facts and bytes per op hand-worked from the shapes, and the whole against a real CPU graph."""
    from transformers import BartConfig, BartForCausalLM

    from speccat.census.kernels.attention import ATTENTION_IMPL

    spec = run_census(TINY_BART, name="tiny-bart", seq_length=SEQ).to_dict()
    ops, facts = spec["ops"]["decoder"], spec["variants"]["decoder"]
    # fc1 and fc2 (the cross-attention's four projections never ran: no part of the feed-forward)
    assert ops["ffMM"] == 2 and ops["attMM"] == 4
    assert ops["ffAct"] == 1 and facts["act_saved"] == 1 and not facts["ff_fused_gate_up"]
    assert spec["intermediate_size"] == W
    params = spec["params"]["kinds"]["decoder"]
    assert params["ffn_dense"] == 2 * H * W + W + H  # fc1 and fc2 with their biases
    assert params["other"] == 4 * (H * H + H)  # the cross-attention's q, k, v, o: held, never run

    booked = spec["measured"]["decoder"]["bytes_per_token"]
    d = H // HEADS
    assert booked["attMM"] == BF16 * H  # q, k, v keep the layer's input (o_proj's input is the kernel's output)
    assert booked["attBMM"] == 3 * BF16 * HEADS * d  # q, k, v heads-major
    assert booked["softmax"] == BF16 * HEADS * d + FP32 * HEADS  # the kernel's output, its fp32 log-sum-exp
    assert booked["normOp"] == 2 * (BF16 * H + 2 * FP32)  # two LayerNorms run: input, fp32 mean and rstd (the cross one does not)
    assert booked["ffMM"] == BF16 * H + BF16 * W  # fc1's input; fc2's input (GELU's output)
    assert booked["ffAct"] == BF16 * W  # GELU keeps its input (fc1's output)
    assert booked["dropout"] == booked["other"] == 0

    # A real CPU forward of the same layer: its graph holds exactly those storages (the CPU keeps
    # LayerNorm statistics in bf16, CUDA and the census in fp32).
    config = BartConfig(
        d_model=H, decoder_attention_heads=HEADS, decoder_ffn_dim=W, decoder_layers=1, vocab_size=128, max_position_embeddings=128,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, activation_function="gelu",
    )  # fmt: skip
    config._attn_implementation = ATTENTION_IMPL
    torch.manual_seed(0)
    model = BartForCausalLM(config).to(torch.bfloat16)
    x = torch.randn(1, SEQ, H, dtype=torch.bfloat16, requires_grad=True)
    real = saved_by_layer(model, model.model.decoder.layers[0], x)
    wide = [t for t in real.values() if t.shape[-1] == W]
    assert len(wide) == 2 and all(t.untyped_storage().nbytes() == BF16 * W * SEQ for t in wide)  # GELU's input, fc2's input
    stats = [t for t in real.values() if t.shape == (1, SEQ, 1)]
    assert len(stats) == 4 and all(t.dtype == torch.bfloat16 for t in stats)
    cpu = sum(t.untyped_storage().nbytes() for t in real.values())
    assert sum(booked.values()) * SEQ == cpu + len(stats) * SEQ * (FP32 - BF16)


def test_the_default_bart_config_is_priced_within_one_percent(records, grid):
    """The records' dense MLP prices bart's default layer (hidden 1024, ffn 4096) at the census point."""
    from bench.bench_registry import default_config

    spec = run_census(default_config("bart"), name="bart", seq_length=256).to_dict()
    assert spec["ops"]["decoder"]["ffMM"] == 2 and spec["ops"]["decoder"]["ffAct"] == 1
    measured = measured_per_token(spec)
    rows = [r for r in price_points(spec, records, grid) if r["point"] == "census"]
    assert rows and all(abs(r["priced_per_token"] / measured[r["kind"], r["point"]] - 1) < 0.01 for r in rows)
