"""Cross-attention layers (mllama's; docs/census.md, "Cross-attention layers"): the kinds and
counts of the registry's default mllama; what the census books for one cross-attention layer
against a real CPU forward and backward of the same layer, storage by storage; text-only
training (no encoder tokens), where transformers skips the layer; priced against measured.

The census runs the layer's attention through `speccat::flash_attention`, which keeps what a
flash kernel keeps: q, k and v as given (k and v per encoder token, kv heads unexpanded), its
output and an fp32 log-sum-exp per head and decoder token. transformers' reference path (eager
attention: matmuls and a softmax in torch) keeps k and v expanded to every head, the fp32
probabilities over the encoder's tokens and their bf16 cast, and o_proj's contiguous copy of its
output; the test states that difference storage by storage.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from support.layer_runs import assert_same_grads, saves_and_grads, signature

from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.points import check_prices, measured_per_token, price_points
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.settings import load_settings
from speccat.census import run_census

BF16, FP32 = 2, 4
H, W, A, KV, D, S = 64, 128, 4, 2, 16, 32  # hidden, MLP width, heads, kv heads, head width, decoder tokens
TEXT = {
    "hidden_size": H, "intermediate_size": W, "num_attention_heads": A, "num_key_value_heads": KV, "num_hidden_layers": 2,
    "cross_attention_layers": [1], "vocab_size": 256, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
}  # fmt: skip
TINY = {"model_type": "mllama", "text_config": TEXT}
SEQ = 256  # the registry's census length


@pytest.fixture(scope="module")
def tiny():
    return run_census(TINY, name="tiny-mllama", seq_length=S)


@pytest.fixture(scope="module")
def default():
    return run_census({"model_type": "mllama"}, name="mllama", seq_length=SEQ)


def test_the_registry_default_mllama_gives_a_cross_attention_kind_where_its_config_says(default):
    from transformers import MllamaTextConfig

    stated = MllamaTextConfig()
    assert stated.num_hidden_layers == 40 and stated.cross_attention_layers == [3, 8, 13, 18, 23, 28, 33, 38]
    # by hand: three self-attention layers, then a cross-attention layer every fifth, the last
    # self-attention layer after layer 38
    expected = [{"kind": "full_dense", "count": 3}, {"kind": "cross_dense", "count": 1}]
    expected += [{"kind": "full_dense", "count": 4}, {"kind": "cross_dense", "count": 1}] * 7 + [{"kind": "full_dense", "count": 1}]
    assert default["layers"] == expected
    assert sum(g["count"] for g in default["layers"] if g["kind"] == "cross_dense") == 8
    assert sum(g["count"] for g in default["layers"] if g["kind"] == "full_dense") == 32
    assert default["flavours"]["cross_dense"] == {"attention": "cross", "ffn": "dense"}
    assert default["flavours"]["full_dense"] == {"attention": "full", "ffn": "dense"}
    ops = default["ops"]["cross_dense"]
    # q, k, v and o projections; one attention call; gate, up, down; two norms on the stream
    assert {op: ops[op] for op in ("attMM", "attBMM", "softmax", "ffMM", "ffAct", "normOp", "linrec")} == {
        "attMM": 4, "attBMM": 2, "softmax": 1, "ffMM": 3, "ffAct": 1, "normOp": 2, "linrec": 0,
    }  # fmt: skip
    # the model-wide attention dims and flags are the self-attention layers' (which have no
    # QK-norm); the cross-attention kind's per-head q and k norms are its variant fact
    assert (default["num_attention_heads"], default["num_key_value_heads"], default["head_dim"]) == (32, 8, 128)
    assert default["qk_norm"] is False and "attention_dims" not in default
    assert default["variants"]["cross_dense"]["qk_norm_per_head"] is True
    assert default["variants"]["full_dense"]["qk_norm_per_head"] is False
    # the two tanh gates are the layer's own parameters
    assert default["params"]["kinds"]["cross_dense"]["other"] == 2


def test_without_encoder_tokens_the_decoder_skips_the_layer_and_it_keeps_nothing(tiny):
    """Text-only training: MllamaTextModel's forward skips a cross-attention layer when it has no
    encoder states (nor a cache of them), so the layer, its MLP included, keeps nothing."""
    from transformers import MllamaTextConfig
    from transformers.models.mllama.modeling_mllama import MllamaForCausalLM

    torch.manual_seed(0)
    model = MllamaForCausalLM(MllamaTextConfig(**TEXT)).train()
    called = []
    model.model.layers[1].register_forward_pre_hook(lambda *_: called.append(1))
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        model(input_ids=torch.randint(3, 256, (1, S)), use_cache=False)
    assert called == [] and kept  # the self-attention layer kept its tensors; the cross-attention layer never ran
    booked = tiny["measured"]["cross_dense"]["bytes_per_token"]
    assert set(booked.values()) == {0.0} and tiny["measured"]["cross_dense"]["attention_impl"] == "speccat::flash_attention"
    # priced at the grid's default setting (encoder_tokens 0): nothing, also under full recompute
    records, grid = load_records(), load_settings()
    prices = price_layers(tiny, records, grid.with_settings([grid.setting({"seq_length": S})]))
    k = prices.kinds.index("cross_dense")
    assert float(prices.total[k, 0, 0]) == 0.0 and float(prices.full[k, 0]) == 0.0
    assert float(prices.total[prices.kinds.index("full_dense"), 0, 0]) > 0


def _cross_layer_saves(impl: str, encoder: int, dtype: torch.dtype):
    """A real forward and backward of the tiny model's cross-attention layer (1) given encoder
    states: (its kept storages' signature, its gradients)."""
    from transformers import MllamaTextConfig
    from transformers.models.mllama.modeling_mllama import MllamaForCausalLM

    import speccat.census.kernels.attention  # noqa: F401  (registers `speccat` with transformers)

    config = MllamaTextConfig(**TEXT)
    config._attn_implementation = impl
    torch.manual_seed(0)
    model = MllamaForCausalLM(config).to(dtype).train()
    layer = model.model.layers[1]
    with torch.no_grad():  # the gates start at tanh(0) = 0, which would hide the attention's gradients
        layer.cross_attn_attn_gate.fill_(0.5)
        layer.cross_attn_mlp_gate.fill_(-0.3)
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=dtype, requires_grad=True)
    states = torch.randn(1, encoder, H, dtype=dtype, requires_grad=True)
    kept, grads = saves_and_grads(
        model, layer, x, cross_attention_states=states, cross_attention_mask=None, attention_mask=None, full_text_row_masked_out_mask=None
    )
    return signature(kept.values()), grads


def _sizes(kept) -> Counter:
    return Counter((dtype, n) for _, dtype, n in kept)


@pytest.mark.parametrize("encoder", [16, 8])  # the census's points at 32 decoder tokens (across.yaml factors 0.5, 0.25)
def test_a_cross_attention_layer_books_what_a_real_layer_keeps_storage_by_storage(tiny, encoder):
    f32, bf16 = torch.float32, torch.bfloat16
    kept, _ = _cross_layer_saves("speccat", encoder, bf16)
    E = encoder
    norm = [((1, S, H), f32), ((1, S, 1), f32), ((1, S, H), bf16)]  # an RMSNorm's fp32 input, rstd, bf16 normalised input
    expected = [
        *norm,
        ((S, H), bf16),  # q_proj's input (the norm's output); k_proj's and v_proj's is the encoder states: the layer's input
        ((1, A, S, D), f32), ((1, A, S, 1), f32), ((1, A, S, D), bf16),  # q_norm (per head, per decoder token)
        ((1, KV, E, D), f32), ((1, KV, E, 1), f32), ((1, KV, E, D), bf16),  # k_norm (per head, per encoder token)
        ((1, A, S, D), bf16), ((1, KV, E, D), bf16), ((1, KV, E, D), bf16),  # the kernel's q, k, v
        ((1, S, A, D), bf16), ((1, A, S), f32),  # its output (o_proj's input: a view) and log-sum-exp
        ((1,), bf16), ((1, S, H), bf16),  # the attention gate: tanh's output, and o_proj's output the product keeps
        *norm,
        ((S, H), bf16), ((1, S, W), bf16), ((1, S, W), bf16), ((1, S, W), bf16), ((S, W), bf16),  # the gated MLP
        ((1,), bf16), ((1, S, H), bf16),  # the MLP gate: tanh's output, and the MLP's output the product keeps
    ]  # fmt: skip
    assert sorted(((s, d) for s, d, _ in kept), key=str) == sorted(expected, key=str)
    assert all(n == s_numel(s) * d.itemsize for s, d, n in kept)  # no storage larger than its tensor
    # the census: the same bytes, booked per op, per decoder token at the point with these encoder tokens
    point = next(p for p in tiny["measured_at"] if p["point"] == f"encoder {encoder}")
    assert point["encoder_tokens"] == encoder and point["seq_length"] == S
    booked = point["bytes_per_token"]["cross_dense"]
    assert sum(booked.values()) * S == sum(n for *_, n in kept)
    assert booked["other"] == 0 and booked["cached"] == 0
    assert booked["attBMM"] * S == BF16 * (A * S * D + 2 * KV * E * D)
    assert booked["softmax"] * S == BF16 * S * A * D + FP32 * A * S
    assert booked["attMM"] * S == BF16 * (S * H + S * H + 1)
    assert booked["ffMM"] * S == BF16 * (S * H + 3 * S * W + S * H + 1)
    assert booked["normOp"] * S == 2 * (FP32 * S * H + FP32 * S + BF16 * S * H) + (FP32 + BF16) * D * (A * S + KV * E) + FP32 * (A * S + KV * E)


def s_numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_the_reference_path_keeps_what_eager_attention_keeps_instead_of_the_kernels_set():
    """transformers' eager attention against speccat's kernel, storage by storage (bf16), and the
    same gradients (fp32): the kernel is non-causal over the encoder's keys, as eager attention
    without a mask is."""
    E = 12
    f32, bf16 = torch.float32, torch.bfloat16
    ours, _ = _cross_layer_saves("speccat", E, bf16)
    eager, _ = _cross_layer_saves("eager", E, bf16)
    only_ours = _sizes(ours) - _sizes(eager)
    only_eager = _sizes(eager) - _sizes(ours)
    # the kernel keeps k and v unexpanded (one storage each beside k_norm's bf16 one, which
    # eager keeps too), its output and its log-sum-exp
    assert only_ours == Counter({(bf16, BF16 * KV * E * D): 2, (f32, FP32 * A * S): 1})
    # eager keeps k and v expanded to every head (repeat_kv), the fp32 probabilities over the
    # encoder's tokens and their bf16 cast (the product with v keeps it); its output is
    # (b, a, s, d), so o_proj keeps a contiguous copy — as large as the kernel's output, which o_proj
    # keeps as a view, so both sides have one storage of that size and it is no difference
    assert only_eager == Counter({(bf16, BF16 * A * E * D): 2, (f32, FP32 * A * S * E): 1, (bf16, BF16 * A * S * E): 1})
    difference = sum(n for *_, n in eager) - sum(n for *_, n in ours)
    assert difference == 2 * BF16 * (A - KV) * E * D + (FP32 + BF16) * A * S * E - FP32 * A * S
    _, ours_grads = _cross_layer_saves("speccat", E, torch.float32)
    _, eager_grads = _cross_layer_saves("eager", E, torch.float32)
    assert "cross_attention_states" in ours_grads
    assert_same_grads(ours_grads, eager_grads)


@pytest.mark.parametrize("config,seq", [(TINY, S), ({"model_type": "mllama"}, SEQ)])
def test_cross_attention_is_priced_as_measured(config, seq):
    spec = run_census(config, name="mllama", seq_length=seq).to_dict()
    records, grid = load_records(), load_settings()
    rows = price_points(spec, records, grid)
    measured = measured_per_token(spec)
    cross = [r for r in rows if r["kind"] == "cross_dense" and (r["kind"], r["point"]) in measured]
    assert {r["point"] for r in cross} == {"census", f"encoder {seq // 2}", f"encoder {seq // 4}"}
    for row in cross:
        got = measured[row["kind"], row["point"]]
        if row["point"] == "census":
            assert got == row["priced_per_token"] == 0.0
        else:
            assert abs(row["priced_per_token"] / got - 1) < 1e-9, row
    check_prices(spec, rows, records)
    # what scales with the encoder's tokens is priced per encoder token: the two points differ
    # by the k and v the kernel keeps and the k norm's saves, (seq/2 - seq/4) encoder tokens of them
    a, kv, d = spec["num_attention_heads"], spec["num_key_value_heads"], spec["head_dim"]
    half, quarter = (next(r["priced_per_token"] for r in cross if r["point"] == f"encoder {n}") for n in (seq // 2, seq // 4))
    per_encoder_token = 2 * BF16 * kv * d + (FP32 + BF16) * kv * d + FP32 * kv
    assert abs((half - quarter) * seq - (seq // 2 - seq // 4) * per_encoder_token) < 1e-6 * half * seq
    assert a > kv


def test_a_planner_prices_another_encoder_length_through_the_fixed_setting(default):
    """encoder_tokens is one value for the whole grid (0): the grid's settings and their ids are
    those without it; a setting built with another value states it and prices the layer."""
    records, grid = load_records(), load_settings()
    assert grid.fixed["encoder_tokens"].values == (0,) and "encoder_tokens" not in grid.fields
    assert all("encoder_tokens" not in s for s in grid.settings)
    plain = grid.setting({"seq_length": SEQ})
    assert grid.setting({"seq_length": SEQ, "encoder_tokens": 0}) == plain
    images = grid.setting({"seq_length": SEQ, "encoder_tokens": 6404})  # four tiles of 1601 vision tokens
    assert images["encoder_tokens"] == 6404 and images["setting_id"] != plain["setting_id"]
    prices = price_layers(default, records, grid.with_settings([plain, images]))
    k, f = prices.kinds.index("cross_dense"), prices.kinds.index("full_dense")
    assert float(prices.total[k, 0, 0]) == 0.0 < float(prices.total[k, 1, 0])
    assert float(prices.total[f, 0, 0]) == float(prices.total[f, 1, 0])  # self-attention does not read it


def test_across_settings_the_cross_attention_kind_is_measured_recomputed_given_encoder_tokens_and_priced_as_measured():
    """With `across`, each switch set is recomputed given encoder tokens too (the first count),
    and the records price every such point as the census measured it."""
    spec = run_census(TINY, name="tiny-mllama", seq_length=S, across=True).to_dict()
    records, grid = load_records(), load_settings()
    rows = price_points(spec, records, grid)
    measured = measured_per_token(spec)
    recomputed = [p for p in spec["measured_at"] if p["point"].startswith(f"encoder {S // 2} recompute ")]
    assert {tuple(p["recompute"]) for p in recomputed} >= {("softmax",), ("normOp",), tuple(records.switches)}
    assert all(p["encoder_tokens"] == S // 2 and set(p["bytes_per_token"]) == {"cross_dense"} for p in recomputed)
    cross = [r for r in rows if r["kind"] == "cross_dense" and r["point"].startswith("encoder ")]
    assert len(cross) == 2 + len(recomputed)
    for row in cross:
        assert abs(row["priced_per_token"] / measured[row["kind"], row["point"]] - 1) < 1e-9, row
    everything = next(p for p in recomputed if p["point"].endswith(" all"))["bytes_per_token"]["cross_dense"]
    plain = next(p for p in spec["measured_at"] if p["point"] == f"encoder {S // 2}")["bytes_per_token"]["cross_dense"]
    assert 0 < sum(everything.values()) - everything["cached"] < sum(plain.values())
    check_prices(spec, rows, records)
