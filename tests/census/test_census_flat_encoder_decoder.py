"""A flat encoder-decoder config (bart, marian: one config class, no sub-config, the decoder's
sizes in `decoder_*` fields). transformers' decoder text config moves those fields to their plain
names and deletes them; the causal LM reads the `decoder_*` fields, so the census keeps them on
the text config at the config's values: marian's `decoder_vocab_size` (None as a class default)
builds, and a decoder sized apart from the encoder is built and censused at its own sizes.
"""

from __future__ import annotations

import torch
from support.layer_runs import saved_by_layer

from speccat.census import run_census

BF16, FP32 = 2, 4
H, HEADS, W, LAYERS, VOCAB, SEQ = 64, 8, 256, 3, 96, 32
TINY_MARIAN = {
    "model_type": "marian", "d_model": H, "decoder_attention_heads": HEADS, "decoder_ffn_dim": W, "decoder_layers": LAYERS,
    "decoder_vocab_size": VOCAB, "encoder_attention_heads": 4, "encoder_ffn_dim": 128, "encoder_layers": 1, "vocab_size": 128,
    "pad_token_id": VOCAB - 1, "decoder_start_token_id": VOCAB - 1, "max_position_embeddings": 128,
    "dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0, "activation_function": "gelu",
}  # fmt: skip


def test_the_decoder_is_censused_at_its_own_sizes():
    spec = run_census(TINY_MARIAN, name="tiny-marian", seq_length=SEQ).to_dict()
    assert spec["layers"] == [{"kind": "decoder", "count": LAYERS}]
    assert (spec["num_attention_heads"], spec["intermediate_size"], spec["vocab_size"]) == (HEADS, W, VOCAB)
    assert spec["params"]["embedding"] == VOCAB * H


def test_the_decoder_layer_books_what_its_real_graph_holds():
    """Bytes per op hand-worked from the decoder's sizes, and the whole against a real CPU graph
    of transformers' MarianForCausalLM built from the same config."""
    from transformers import MarianConfig, MarianForCausalLM

    from speccat.census.kernels.attention import ATTENTION_IMPL

    booked = run_census(TINY_MARIAN, name="tiny-marian", seq_length=SEQ).to_dict()["measured"]["decoder"]["bytes_per_token"]
    d = H // HEADS
    assert booked["attMM"] == BF16 * H  # q, k, v keep the layer's input
    assert booked["attBMM"] == 3 * BF16 * HEADS * d
    assert booked["softmax"] == BF16 * HEADS * d + FP32 * HEADS  # the kernel's output, its fp32 log-sum-exp
    assert booked["normOp"] == 2 * (BF16 * H + 2 * FP32)  # two LayerNorms: input, fp32 mean and rstd
    assert booked["ffMM"] == BF16 * H + BF16 * W  # fc1's input; fc2's input
    assert booked["ffAct"] == BF16 * W  # GELU keeps fc1's output

    config = MarianConfig(**{k: v for k, v in TINY_MARIAN.items() if k != "model_type"})
    config._attn_implementation = ATTENTION_IMPL
    torch.manual_seed(0)
    model = MarianForCausalLM(config).to(torch.bfloat16)
    assert len(model.model.decoder.layers) == LAYERS and model.model.decoder.embed_tokens.num_embeddings == VOCAB
    x = torch.randn(1, SEQ, H, dtype=torch.bfloat16, requires_grad=True)
    real = saved_by_layer(model, model.model.decoder.layers[0], x)
    stats = [t for t in real.values() if t.shape == (1, SEQ, 1)]  # the CPU keeps LayerNorm statistics in bf16
    assert len(stats) == 4
    cpu = sum(t.untyped_storage().nbytes() for t in real.values())
    assert sum(booked.values()) * SEQ == cpu + len(stats) * SEQ * (FP32 - BF16)
