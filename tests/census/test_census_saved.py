"""What the census books as saved for backward, checked against sources it does not share code with.

- A real CPU forward of one layer, whose autograd graph is walked from the layer's output: the
  tensors its nodes hold are exactly what backward can reach (a router's group scores, freed
  with their nodes before backward, are not among them).
- Hand-worked formulas from the shapes, for what the CPU cannot show: the CUDA dtypes of dropout
  masks (bool) and LayerNorm statistics (fp32), and the attention output that o_proj keeps a
  copy of when q is built with torch.cat (the GPU kernel allocates its output in q's layout).
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import saved_by_graph, saved_by_layer

BF16, FP32, BOOL = 2, 4, 1

TINY_DEEPSEEK = {
    "model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 8,
    "n_shared_experts": 1, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1,
    "kv_lora_rank": 16, "q_lora_rank": 24, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
    "vocab_size": 128,
}  # fmt: skip


@pytest.mark.parametrize("seq", [32])
def test_each_layer_books_what_its_real_graph_holds(seq):
    """Tiny DeepSeek-V3 (MLA, group-limited router, shared expert): census bytes == a real CPU graph's."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from speccat.census import run_census
    from speccat.census.kernels.attention import ATTENTION_IMPL

    spec = run_census(TINY_DEEPSEEK, name="tiny-deepseek", seq_length=seq)
    config = AutoConfig.for_model(**TINY_DEEPSEEK)
    config._attn_implementation = ATTENTION_IMPL
    config._experts_implementation = "grouped_mm"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    fixed = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
    for kind, index in (("dense", 0), ("moe", 1)):
        x = torch.randn(1, seq, 64, dtype=torch.bfloat16, requires_grad=True)
        rotary = model.model.rotary_emb(x, torch.arange(seq).unsqueeze(0))
        out = model.model.layers[index](x, position_embeddings=rotary, attention_mask=None)
        out = out[0] if isinstance(out, tuple) else out
        left_out = fixed | {t.untyped_storage()._cdata for t in rotary} | {out.untyped_storage()._cdata}
        real = sum(t.untyped_storage().nbytes() for key, t in saved_by_graph(out).items() if key not in left_out)
        assert sum(spec["measured"][kind]["bytes_per_token"].values()) * seq == real, kind


def _census_bytes(config: dict, seq: int = 64) -> dict[str, float]:
    from speccat.census import run_census

    spec = run_census(config, name="tiny", seq_length=seq)
    (measured,) = spec["measured"].values()
    return measured["bytes_per_token"]


def test_o_proj_keeps_a_copy_when_q_is_built_with_cat():
    """Phi-3 builds q with torch.cat (partial rope): the kernel's output is heads-major and o_proj copies it."""
    h, heads, d = 64, 4, 16
    config = {
        "model_type": "phi3", "hidden_size": h, "num_attention_heads": heads, "num_key_value_heads": heads,
        "intermediate_size": 128, "num_hidden_layers": 1, "vocab_size": 128, "partial_rotary_factor": 0.5,
        "pad_token_id": 0,
    }  # fmt: skip
    booked = _census_bytes(config)
    # qkv_proj keeps its input (the norm's bf16 output, h); o_proj keeps the reshaped copy (heads·d).
    assert booked["attMM"] == BF16 * (h + heads * d)
    # The kernel keeps its inputs q, k (new tensors), v (a view of the fused qkv output: the whole
    # base); its output and fp32 log-sum-exp are its own (softmax).
    assert booked["attBMM"] == BF16 * (heads * d + heads * d + 3 * heads * d)
    assert booked["softmax"] == BF16 * heads * d + 4 * heads


def test_layer_norm_keeps_its_layer_input_and_cuda_dtypes():
    """StarCoder2: LayerNorms keep their input (the first one the layer's own input) and fp32 mean and
    rstd; its two hidden-state dropouts keep bool masks."""
    h, heads, kv, w = 64, 4, 2, 256
    config = {
        "model_type": "starcoder2", "hidden_size": h, "num_attention_heads": heads, "num_key_value_heads": kv,
        "intermediate_size": w, "num_hidden_layers": 1, "vocab_size": 128, "residual_dropout": 0.1,
        "torch_dtype": "bfloat16",
    }  # fmt: skip
    booked = _census_bytes(config)
    assert booked["normOp"] == 2 * (BF16 * h + FP32 + FP32)
    assert booked["dropout"] == 2 * BOOL * h


def test_linear_attention_keeps_what_the_production_kernels_keep():
    """Qwen3-Next's gated delta net under causal-conv1d and flash-linear-attention: the conv keeps
    only its input (the concatenated q, k, v), and the delta rule a contiguous copy of v, not the
    conv output it is a view of. Hand-worked from the shapes."""
    h, heads, kv, dk, dv, width = 64, 4, 2, 16, 16, 4
    config = {
        "model_type": "qwen3_next", "hidden_size": h, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "intermediate_size": 96, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
        "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 4, "full_attention_interval": 4,
        "linear_num_value_heads": heads, "linear_num_key_heads": kv, "linear_key_head_dim": dk,
        "linear_value_head_dim": dv, "linear_conv_kernel_dim": width, "vocab_size": 128,
    }  # fmt: skip
    from speccat.census import run_census

    spec = run_census(config, name="tiny-next", seq_length=64)
    linear = next(k for k, f in spec["flavours"].items() if f["attention"] == "linear")
    booked = spec["measured"][linear]["bytes_per_token"]
    conv = 2 * kv * dk + heads * dv  # q, k, v side by side
    # in_proj's input; the conv's input; beta's sigmoid; the decay's fp32 softplus input and
    # output; out_proj's input (the gated norm's output) — and no conv or SiLU output. The
    # per-layer constants (fp32 copies of A_log and its exponent, a few hundred bytes) are
    # allowed for: they are not per token.
    assert booked["attMM"] * 64 == pytest.approx((BF16 * h + BF16 * conv + BF16 * heads + 2 * FP32 * heads + BF16 * heads * dv) * 64, abs=1024)
    # normalised q and k (key heads), their fp32 inverse norms, v's own copy, the fp32 chunk
    # decay, the WY matrix (64 wide); q and k are per key head, dk wide
    assert booked["linrec"] == BF16 * 2 * kv * dk + 2 * FP32 * kv + BF16 * heads * dv + FP32 * heads + BF16 * heads * 64


def test_gpt2s_python_gelu_chain_and_fused_qkv_views():
    """gpt2: gelu_new is Python elementwise code, and q, k, v are views of c_attn's one output
    (no rotary embedding makes q and k anew). A real CPU graph holds what the census books, and
    the census states both facts the records price them with."""
    from speccat.census import run_census

    h, heads, inner, seq = 64, 4, 256, 32
    config = {
        "model_type": "gpt2", "n_embd": h, "n_head": heads, "n_inner": inner, "n_layer": 1, "vocab_size": 128,
        "n_positions": 128, "activation_function": "gelu_new", "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
    }  # fmt: skip
    spec = run_census(config, name="tiny-gpt2", seq_length=seq)
    booked = spec["measured"]["decoder"]["bytes_per_token"]
    # 0.5 * x * (1 + tanh(c * (x + 0.044715 * x**3))): pow keeps x, tanh its output, the last
    # product both of its factors (0.5 x and 1 + tanh); c_proj keeps the product itself (ffMM).
    assert booked["ffAct"] == 4 * BF16 * inner
    assert spec["variants"]["decoder"]["act_saved"] == 4
    # The kernel keeps q, k and v: three views of one storage, c_attn's output, held once.
    assert booked["attBMM"] == BF16 * 3 * h
    assert spec["variants"]["decoder"]["qk_in_projection"] and spec["variants"]["decoder"]["v_in_projection"]

    cpu, to_cuda = _real_layer_bytes(config, lambda m, x: (m.transformer.h[0], {}), seq, h)
    # The two LayerNorms' mean and rstd: the CPU keeps them in bf16, CUDA (what the census books) in fp32.
    assert to_cuda == 4 * seq * (FP32 - BF16)
    assert sum(booked.values()) * seq == cpu + to_cuda


def _priced_over_measured(spec: dict) -> float:
    """The records' price of the spec's one kind at the census's point over what it measured."""
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.points import price_points, worst_ratio
    from speccat.catalogue.records.settings import load_settings

    rows = price_points(spec, load_records(), load_settings())
    assert len(rows) == 1  # one kind, one point
    return worst_ratio(spec, rows)[2]


def _real_layer_bytes(config: dict, layer_of, seq: int, h: int) -> tuple[int, int]:
    """(bytes a real CPU graph of one layer holds, the bytes its per-token statistics (mean, rstd)
    would add at CUDA's fp32), the layer's parameters, output and position tables left out: a
    LayerNorm on bf16 keeps its statistics in bf16 on the CPU, in fp32 on CUDA."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from speccat.census.kernels.attention import ATTENTION_IMPL

    hf = AutoConfig.for_model(**config)
    hf._attn_implementation = ATTENTION_IMPL
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16)
    fixed = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
    x = torch.randn(1, seq, h, dtype=torch.bfloat16, requires_grad=True)
    layer, kwargs = layer_of(model, x)
    out = layer(x, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    tables = {t.untyped_storage()._cdata for t in kwargs.get("position_embeddings", ())}
    real = {key: t for key, t in saved_by_graph(out).items() if key not in fixed | tables | {out.untyped_storage()._cdata}}
    stats = [t for t in real.values() if t.shape == (1, seq, 1)]
    return sum(t.untyped_storage().nbytes() for t in real.values()), sum((FP32 - t.element_size()) * t.numel() for t in stats)


def test_post_norms_nested_in_the_layers_children_are_the_layers_norms():
    """BERT (as a causal LM) normalises after the residual add inside `attention.output` and
    `output`: two LayerNorms of the layer's width, nested, each keeping its input and fp32 mean
    and rstd. The census counts and books both (normOp 2), and a real CPU graph holds what it books."""
    from speccat.census import run_census

    h, heads, inner, seq = 64, 4, 256, 32
    config = {
        "model_type": "bert", "hidden_size": h, "num_attention_heads": heads, "intermediate_size": inner,
        "num_hidden_layers": 1, "vocab_size": 128, "is_decoder": True, "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    }  # fmt: skip
    spec = run_census(config, name="tiny-bert", seq_length=seq)
    assert spec["ops"]["decoder"]["normOp"] == 2 and spec["layer_norms"]
    booked = spec["measured"]["decoder"]["bytes_per_token"]
    assert booked["normOp"] == 2 * (BF16 * h + FP32 + FP32)
    assert _priced_over_measured(spec) == pytest.approx(1, abs=1e-9)
    cpu, to_cuda = _real_layer_bytes(config, lambda m, x: (m.bert.encoder.layer[0], {}), seq, h)
    assert to_cuda == 4 * seq * (FP32 - BF16)  # two LayerNorms' mean and rstd
    assert sum(booked.values()) * seq == cpu + to_cuda


def test_norms_reading_one_input_keep_it_once():
    """gpt-neox's parallel residual: both LayerNorms take the layer's input, which is kept once;
    each keeps its own statistics. The census states it (norm_inputs_shared 1) and books one
    input, and a real CPU graph holds what it books."""
    from speccat.census import run_census

    h, heads, inner, seq = 64, 4, 256, 32
    config = {
        "model_type": "gpt_neox", "hidden_size": h, "num_attention_heads": heads, "intermediate_size": inner,
        "num_hidden_layers": 1, "vocab_size": 128, "use_parallel_residual": True, "rotary_pct": 0.25,
        "hidden_dropout": 0.0, "attention_dropout": 0.0,
    }  # fmt: skip
    spec = run_census(config, name="tiny-neox", seq_length=seq)
    assert spec["ops"]["decoder"]["normOp"] == 2 and spec["variants"]["decoder"]["norm_inputs_shared"] == 1
    booked = spec["measured"]["decoder"]["bytes_per_token"]
    assert booked["normOp"] == BF16 * h + 2 * (FP32 + FP32)
    assert _priced_over_measured(spec) == pytest.approx(1, abs=1e-9)

    def layer_of(model, x):
        rotary = model.gpt_neox.rotary_emb(x, torch.arange(seq).unsqueeze(0))
        return model.gpt_neox.layers[0], {"position_embeddings": rotary}

    cpu, to_cuda = _real_layer_bytes(config, layer_of, seq, h)
    assert to_cuda == 4 * seq * (FP32 - BF16)  # two LayerNorms' mean and rstd
    assert sum(booked.values()) * seq == cpu + to_cuda


def _rotary_layer(model, x):
    """A llama-style model's first layer and its rotary tables for `x`."""
    seq = x.shape[1]
    return model.model.layers[0], {"position_embeddings": model.model.rotary_emb(x, torch.arange(seq).unsqueeze(0))}


def test_a_parallel_block_keeps_its_one_normalised_input_once():
    """phi: attention and MLP both read the one LayerNorm's output, which qkv's projections and
    fc1 keep as one storage (ff_input_shared): the records' ffn slot does not count it again."""
    from speccat.census import run_census

    h, heads, inner, seq = 64, 4, 256, 32
    config = {
        "model_type": "phi", "hidden_size": h, "num_attention_heads": heads, "intermediate_size": inner,
        "num_hidden_layers": 1, "vocab_size": 128, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0,
    }  # fmt: skip
    spec = run_census(config, name="tiny-phi", seq_length=seq)
    assert spec["variants"]["decoder"]["ff_input_shared"] and spec["ops"]["decoder"]["normOp"] == 1
    booked = spec["measured"]["decoder"]["bytes_per_token"]
    # fc1 keeps no input of its own; fc2 keeps gelu_new's product (its four kept tensors are ffAct's)
    assert booked["ffMM"] == BF16 * inner
    assert _priced_over_measured(spec) == pytest.approx(1, abs=1e-9)
    cpu, to_cuda = _real_layer_bytes(config, _rotary_layer, seq, h)
    assert to_cuda == 2 * seq * (FP32 - BF16)  # one LayerNorm's mean and rstd
    assert sum(booked.values()) * seq == cpu + to_cuda


def test_a_layer_norm_that_upcasts_keeps_its_fp32_input():
    """OLMo's LayerNorm (no weight) runs in fp32 on an upcast copy of its input: each keeps that
    fp32 copy and fp32 mean and rstd (the CPU too, the input being fp32)."""
    from speccat.census import run_census

    h, heads, inner, seq = 64, 4, 128, 32
    config = {
        "model_type": "olmo", "hidden_size": h, "num_attention_heads": heads, "intermediate_size": inner,
        "num_hidden_layers": 1, "vocab_size": 128, "pad_token_id": 0,
    }  # fmt: skip
    spec = run_census(config, name="tiny-olmo", seq_length=seq)
    assert spec["layer_norms"] and spec["variants"]["decoder"]["norm_upcast"]
    booked = spec["measured"]["decoder"]["bytes_per_token"]
    assert booked["normOp"] == 2 * (FP32 * h + FP32 + FP32)
    assert _priced_over_measured(spec) == pytest.approx(1, abs=1e-9)
    cpu, to_cuda = _real_layer_bytes(config, _rotary_layer, seq, h)
    assert to_cuda == 0 and sum(booked.values()) * seq == cpu  # fp32 statistics on the CPU too


def test_a_relu_keeps_its_output_which_the_down_projection_reads():
    """CTRL's MLP is Linear, ReLU, Linear: ReLU keeps its own output, the very storage the down
    projection keeps as its input, so it is held once, as ffAct's (act_output_read): the ffn slot
    does not count it again under ffMM."""
    from speccat.census import run_census

    h, heads, inner, seq = 64, 4, 256, 32
    config = {
        "model_type": "ctrl", "n_embd": h, "n_head": heads, "dff": inner, "n_layer": 1, "vocab_size": 128,
        "n_positions": 128, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
    }  # fmt: skip
    spec = run_census(config, name="tiny-ctrl", seq_length=seq)
    variants = spec["variants"]["decoder"]
    assert variants["act_output_read"] and variants["act_saved"] == 1
    booked = spec["measured"]["decoder"]["bytes_per_token"]
    assert booked["ffAct"] == BF16 * inner and booked["ffMM"] == BF16 * h  # ReLU's output; the first projection's input
    assert _priced_over_measured(spec) == pytest.approx(1, abs=1e-9)
    cpu, to_cuda = _real_layer_bytes(config, lambda m, x: (m.transformer.h[0], {}), seq, h)
    assert to_cuda == 4 * seq * (FP32 - BF16)  # two LayerNorms' mean and rstd
    assert sum(booked.values()) * seq == cpu + to_cuda


def test_a_models_own_activation_class_is_the_mlps_activation():
    """BLOOM's MLP runs its GELU through its own module (BloomGelu, an autograd function keeping
    its input): the census counts it as the activation (ffAct 1, act_saved 1) and books the
    4h-wide input it keeps to ffAct, as it would torch's GELU; the records price it exactly."""
    from speccat.census import run_census

    h, heads, seq = 64, 4, 32
    config = {"model_type": "bloom", "hidden_size": h, "n_head": heads, "n_layer": 1, "vocab_size": 128}
    spec = run_census(config, name="tiny-bloom", seq_length=seq)
    assert spec["ops"]["decoder"]["ffAct"] == 1 and spec["variants"]["decoder"]["act_saved"] == 1
    booked = spec["measured"]["decoder"]["bytes_per_token"]
    assert booked["ffAct"] == BF16 * 4 * h  # the GELU's input, dense_h_to_4h's output
    assert booked["ffMM"] == BF16 * (h + 4 * h)  # dense_h_to_4h's input, dense_4h_to_h's (the GELU's output)
    assert _priced_over_measured(spec) == pytest.approx(1, abs=1e-9)
