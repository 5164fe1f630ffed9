"""Kimi delta attention (KDA: kimi_linear's and bailing_hybrid's linear-attention layers;
docs/census.md, "How a config becomes a spec", step 4): what the census books for one KDA layer
against a real CPU forward and backward of the same layer, storage by storage; the kernel op's
gradients against transformers' torch path through the whole layer; the kinds; every kind
priced within 2% of what the census measured.

The census runs the recurrence through `speccat::chunk_kda` (census/kernels/kda.py), which keeps what
flash-linear-attention's `chunk_kda` keeps; transformers' torch fallback (`chunk_kimi_delta_attention`
without the kernel hub) keeps its chunked intermediates instead (fp32 copies of q, k, v, the
decay mask of every chunk...), which no GPU run keeps.
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import assert_same_grads, saves_and_grads, signature, tiny_model

from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.points import check_prices, measured_per_token, price_points
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.settings import load_settings
from speccat.census import run_census

BF16, FP32 = 2, 4
H, HEADS, DK, S = 64, 2, 16, 80  # hidden, KDA heads, KDA head width, tokens (a full chunk of 64 and a partial one)
QKV = HEADS * DK
TINY_KIMI = {
    "model_type": "kimi_linear", "hidden_size": H, "intermediate_size": 128, "moe_intermediate_size": 32,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "kv_lora_rank": 16,
    "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
    "vocab_size": 128, "linear_head_dim": DK, "linear_num_heads": HEADS, "layer_types": ["linear_attention", "full_attention"],
    "mlp_layer_types": ["dense", "sparse"], "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
}  # fmt: skip
TINY_BAILING = {
    "model_type": "bailing_hybrid", "hidden_size": H, "intermediate_size": 128, "moe_intermediate_size": 32,
    "num_hidden_layers": 3, "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "kv_lora_rank": 16,
    "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16, "head_dim": DK, "num_local_experts": 4,
    "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "vocab_size": 128,
    "layer_types": ["linear_attention", "linear_attention", "full_attention"], "pad_token_id": 0, "eos_token_id": 2,
    "torch_dtype": "bfloat16",
}  # fmt: skip


@pytest.fixture(scope="module")
def kimi():
    return run_census(TINY_KIMI, name="tiny-kimi-linear", seq_length=S)


def _run_layer(model, dtype, kernel: bool, monkeypatch):
    """One real forward and backward of the model's layer 0 (KDA, dense MLP): (its saves, its
    gradients), through speccat's KDA and conv ops, or transformers' torch path."""
    import sys

    from speccat.census.kernels.causal_conv1d import speccat_causal_conv1d_fn
    from speccat.census.kernels.kda import speccat_chunk_kda

    if kernel:
        home = sys.modules[type(model).__module__]  # the modeling module whose globals the layer calls
        monkeypatch.setattr(home, "chunk_kimi_delta_attention", speccat_chunk_kda)
        monkeypatch.setattr(home, "causal_conv1d_fn", speccat_causal_conv1d_fn)
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=dtype, requires_grad=True)
    kept, grads = saves_and_grads(model, model.model.layers[0], x)
    monkeypatch.undo()
    return kept, grads


def test_the_census_books_what_the_kernel_keeps_storage_by_storage(kimi, monkeypatch):
    kept, _ = _run_layer(tiny_model(TINY_KIMI, torch.bfloat16), torch.bfloat16, True, monkeypatch)
    f32, bf16, bool_ = torch.float32, torch.bfloat16, torch.bool
    norm = [((1, S, H), f32), ((1, S, 1), f32), ((1, S, H), bf16)]  # an RMSNorm's fp32 input, rstd, bf16 normalised input
    gate = (1, S, HEADS, DK)
    expected = [
        *norm,
        # the projections' input (the norm's output, 2-D, read by q, k, v, f_a, b, g_a); the
        # conv kernel's input (q, k, v concatenated, seen transposed); f_b's and g_b's inputs
        # (the low-rank gates' head-wide middles)
        ((S, H), bf16), ((1, 3 * QKV, S), bf16), ((S, DK), bf16), ((S, DK), bf16),
        # the forget gate's softplus written out: exp's output, log's input, where's condition,
        # the product's softplus and -exp(A_log) (one per head, fp32), A_log's exp
        ((1, S, HEADS, DK), f32), ((1, S, HEADS, DK), f32), ((1, S, HEADS, DK), bool_), ((1, S, HEADS, DK), f32),
        ((1, 1, HEADS, 1), f32), ((1, 1, HEADS, 1), f32),
        # beta's sigmoid output (beta as the kernel keeps it)
        ((1, S, HEADS), bf16),
        # the kernel: l2-normalised q and k with fp32 inverse norms, v (contiguous), the fp32
        # chunk-local cumulative gate, the gate as given (fp32 here), Aqk and Akk (64 per head and token)
        ((1, S, HEADS, DK), bf16), ((1, S, HEADS, DK), bf16), ((1, S, HEADS), f32), ((1, S, HEADS), f32),
        ((1, S, HEADS, DK), bf16), (gate, f32), (gate, f32), ((1, S, HEADS, 64), bf16), ((1, S, HEADS, 64), bf16),
        # the gated output norm (one head wide): fp32 input, rstd, the fp32 weight, the
        # normalised input and the weighted product (fp32), the sigmoid's fp32 output
        ((1, S, HEADS, DK), f32), ((1, S, HEADS, 1), f32), ((DK,), f32), ((1, S, HEADS, DK), f32),
        ((1, S, HEADS, DK), f32), ((1, S, HEADS, DK), f32),
        # o_proj's input
        ((S, QKV), bf16),
        *norm,
        # the MLP: gate/up's input, the SiLU's input and output, up's output, down's input
        ((S, H), bf16), ((1, S, 128), bf16), ((1, S, 128), bf16), ((1, S, 128), bf16), ((S, 128), bf16),
    ]  # fmt: skip
    real = signature(kept.values())
    assert sorted(((shape, dtype) for shape, dtype, _ in real), key=str) == sorted(expected, key=str)
    booked = kimi["measured"]["linear_dense"]["bytes_per_token"]
    assert kimi["measured"]["linear_dense"]["attention_impl"] == "speccat::chunk_kda"
    # the real run books every storage the census books, byte for byte
    assert sum(booked.values()) * S == sum(n for _, _, n in real)
    # the kernel's share: q, k, v (bf16), two fp32 inverse norms per head, the fp32 cumulative
    # gate and the fp32 gate, Aqk and Akk
    assert booked["linrec"] == BF16 * 3 * QKV + FP32 * 2 * HEADS + FP32 * 2 * QKV + BF16 * 2 * HEADS * 64


def test_the_kernel_op_computes_what_transformers_computes(monkeypatch):
    """fp32 on CPU: the layer's gradients through speccat's KDA and conv equal transformers' torch path's."""
    model = tiny_model(TINY_KIMI, torch.float32)
    _, ours = _run_layer(model, torch.float32, True, monkeypatch)
    model.zero_grad()
    _, reference = _run_layer(model, torch.float32, False, monkeypatch)
    assert_same_grads(ours, reference)


def test_kimi_linear_gives_its_kinds_and_facts(kimi):
    assert kimi["layers"] == [{"kind": "linear_dense", "count": 1}, {"kind": "full_moe", "count": 1}]
    assert kimi["flavours"]["linear_dense"] == {"attention": "linear", "ffn": "dense"}
    assert (kimi["linear_num_key_heads"], kimi["linear_key_head_dim"], kimi["linear_num_value_heads"], kimi["linear_value_head_dim"]) == (HEADS, DK, HEADS, DK)
    facts = kimi["variants"]["linear_dense"]
    assert (facts["delta_gate_channel_bytes"], facts["delta_gate_fp32"], facts["delta_gate_masks"]) == (FP32, 3, 1)
    assert facts["lowrank_width"] == 2 * DK and facts["gated_norm_sigmoid"] and not facts["gated_norm"]
    ops = kimi["ops"]["linear_dense"]
    # q, k, v and o_proj by the kernel rule (3 a call, and the output projection); one recurrence
    assert (ops["attMM"], ops["linrec"], ops["attBMM"], ops["softmax"]) == (4 + 2, 1, 0, 0)


def test_bailing_hybrid_keeps_its_bf16_gate(monkeypatch):
    """bailing_hybrid's forget gate is one full projection, a sigmoid of a scaled input (its safe
    gate), cast back to bf16: the kernel keeps the bf16 gate, the gate's code two fp32 tensors;
    storage by storage against a real CPU run of its layer 0."""
    spec = run_census(TINY_BAILING, name="tiny-bailing-hybrid", seq_length=S)
    assert [g["kind"] for g in spec["layers"]] == ["linear_dense", "linear_moe", "full_moe"]
    facts = spec["variants"]["linear_dense"]
    assert (facts["delta_gate_channel_bytes"], facts["delta_gate_fp32"], facts["delta_gate_masks"], facts["lowrank_width"]) == (BF16, 2, 0, 0)
    booked = spec["measured"]["linear_dense"]["bytes_per_token"]
    assert booked["linrec"] == BF16 * 3 * QKV + FP32 * 2 * HEADS + FP32 * QKV + BF16 * QKV + BF16 * 2 * HEADS * 64
    kept, _ = _run_layer(tiny_model(TINY_BAILING, torch.bfloat16), torch.bfloat16, True, monkeypatch)
    real = signature(kept.values())
    gate = (1, S, HEADS, DK)
    f32, bf16 = torch.float32, torch.bfloat16
    # of the gate's shape: the gate's own code keeps the fp32 scaled input (the product's) and
    # the sigmoid's fp32 output; the kernel q, k and v (bf16), the fp32 cumulative gate and the
    # bf16 gate as given; the output norm its fp32 input, normalised input, weighted product
    # and sigmoid output
    of_gate = [dtype for shape, dtype, _ in real if shape == gate]
    assert (of_gate.count(f32), of_gate.count(bf16), len(of_gate)) == (2 + 1 + 4, 3 + 1, 11)
    assert sum(booked.values()) * S == sum(n for _, _, n in real)


@pytest.mark.parametrize("config", [TINY_KIMI, TINY_BAILING], ids=["kimi_linear", "bailing_hybrid"])
@pytest.mark.parametrize("seq", [S, 4096])
def test_kda_stacks_are_priced_as_measured(config, seq):
    spec = run_census(config, name="tiny", seq_length=seq)
    records, grid = load_records(), load_settings()
    one = grid.with_settings([grid.setting({"seq_length": seq})])
    prices = price_layers(spec, records, one)
    for i, kind in enumerate(prices.kinds):
        priced, measured = float(prices.total[i, 0, 0]) / seq, sum(spec["measured"][kind]["bytes_per_token"].values())
        assert abs(priced / measured - 1) <= 0.02, (kind, priced, measured)


@pytest.mark.parametrize("config", [TINY_KIMI, TINY_BAILING], ids=["kimi_linear", "bailing_hybrid"])
def test_kda_kinds_are_priced_within_one_percent_at_every_point(config):
    """Across settings too: the tp ranks divide the KDA heads (census/across.yaml
    `linear_num_heads`) as the records do; the low-rank gates' head-wide middles stay whole."""
    spec = run_census(config, name="tiny", seq_length=256, across=True)
    records, grid = load_records(), load_settings()
    rows = price_points(spec, records, grid)
    measured = measured_per_token(spec)
    assert {r["point"] for r in rows} >= {"census", "tp 2", "cp 2"}
    worst = max(abs(r["priced_per_token"] / measured[r["kind"], r["point"]] - 1) for r in rows)
    assert worst < 0.01, worst
    check_prices(spec, rows, records)
