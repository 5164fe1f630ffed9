"""gemma-4's decoder layer (docs/census.md, "Op counts" and "Variant facts"): a per-layer input
gate after the MLP (census/describe/layer_gate.py) and a weightless norm on the values; what the census
books for one layer against a real CPU forward and backward of the same layer, storage by
storage; its facts; priced against measured at the census's point and across settings.

Both runs call attention through `speccat::flash_attention` (the real run on real tensors), so
they keep the same tensors: no difference to explain.
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import signature

from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.points import check_prices, price_points
from speccat.catalogue.records.settings import load_settings
from speccat.census import run_census

BF16, FP32 = 2, 4
H, W, A, KV, D, P, S, V = 64, 128, 4, 2, 16, 16, 32, 128  # hidden, MLP width, heads, kv heads, head width, gate width, tokens, vocabulary
TEXT = {
    "hidden_size": H, "intermediate_size": W, "num_attention_heads": A, "num_key_value_heads": KV, "head_dim": D,
    "global_head_dim": D, "hidden_size_per_layer_input": P, "num_hidden_layers": 3, "sliding_window": 8,
    "layer_types": ["sliding_attention", "sliding_attention", "full_attention"], "vocab_size": V, "vocab_size_per_layer_input": V,
    "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1,
}  # fmt: skip
# Three layers, two probed: a probe of every layer would prove only that the decoder runs with
# the layer count it was built with, and keep a way (census/build/inputs.py) that later probes of fewer
# layers cannot run.
TINY = {"model_type": "gemma4_text", **TEXT}


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY, name="tiny-gemma4", seq_length=S)


def _layer_saves() -> list:
    """A real bf16 forward (from token ids, as the census runs it) and backward of the tiny
    model, keeping what layer 0 saved: its parameters, buffers, inputs (the hidden states, the
    per-layer input, rotary tables) and output left out."""
    from torch.utils._pytree import tree_leaves
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    import speccat.census.kernels.attention  # noqa: F401  (registers `speccat` with transformers)

    config = Gemma4TextConfig(**TEXT)
    config._attn_implementation = "speccat"
    torch.manual_seed(0)
    model = Gemma4ForCausalLM(config).to(torch.bfloat16).train()
    layer = model.model.layers[0]
    saved, running, left_out = {}, [], set()

    def pre(module, args, kwargs):
        running.append(True)
        left_out.update(t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor))

    def post(module, args, kwargs, out):
        running.clear()
        left_out.add(out.untyped_storage()._cdata)

    def pack(t):
        if running:
            saved.setdefault(t.untyped_storage()._cdata, t)
        return t

    layer.register_forward_pre_hook(pre, with_kwargs=True)
    layer.register_forward_hook(post, with_kwargs=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(input_ids=torch.randint(3, V, (1, S)), use_cache=False).logits
    logits.float().square().sum().backward()
    assert layer.per_layer_input_gate.weight.grad is not None and layer.self_attn.v_proj.weight.grad is not None
    left_out |= {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
    return signature(t for key, t in saved.items() if key not in left_out)


def test_a_gemma4_layer_books_what_it_keeps_storage_by_storage(spec):
    kept = _layer_saves()
    f32, bf16 = torch.float32, torch.bfloat16
    # gemma-4's RMSNorm: its fp32 input, the mean square (pow(·, -0.5) keeps its input) and
    # its result (the product keeps it), the fp32 normalised input the weight multiplies, and
    # an fp32 copy of the weight (per layer, not per token)
    stream_norm = [((1, S, H), f32), ((1, S, 1), f32), ((1, S, 1), f32), ((1, S, H), f32), ((H,), f32)]

    def head_norm(heads):  # q_norm, k_norm: the same per head
        return [((1, S, heads, D), f32), ((1, S, heads, 1), f32), ((1, S, heads, 1), f32), ((1, S, heads, D), f32), ((D,), f32)]

    v_norm = [((1, S, KV, D), f32), ((1, S, KV, 1), f32), ((1, S, KV, 1), f32)]  # weightless: no normalised copy, no weight
    expected = [
        *stream_norm * 5,  # input, post-attention, pre-feed-forward, post-feed-forward, post-per-layer-input
        *head_norm(A), *head_norm(KV), *v_norm,
        # q/k/v's input; the kernel's q, k, v, output and fp32 log-sum-exp
        ((S, H), bf16), ((1, A, S, D), bf16), ((1, KV, S, D), bf16), ((1, KV, S, D), bf16), ((1, S, A, D), bf16), ((1, A, S), f32),
        # the MLP: gate/up's input, GELU's input, its output and up's output (the product keeps both), down's input
        ((S, H), bf16), ((1, S, W), bf16), ((1, S, W), bf16), ((1, S, W), bf16), ((S, W), bf16),
        # the per-layer input gate: its input (the stream), GELU's input, its output (the product
        # with the per-layer input keeps it; the per-layer input is the layer's input), the
        # product (the projection back's input)
        ((S, H), bf16), ((1, S, P), bf16), ((1, S, P), bf16), ((S, P), bf16),
    ]  # fmt: skip
    assert sorted(((s, d) for s, d, _ in kept), key=str) == sorted(expected, key=str)
    assert all(n == d.itemsize * torch.Size(s).numel() for s, d, n in kept)  # no storage larger than its tensor
    measured = spec["measured"][spec["layers"][0]["kind"]]
    assert measured["attention_impl"] == "speccat::flash_attention"
    booked = measured["bytes_per_token"]
    assert sum(booked.values()) * S == sum(n for *_, n in kept)
    assert booked["ffMM"] == BF16 * (H + 3 * W) + BF16 * (H + 2 * P)
    assert booked["ffAct"] == BF16 * (W + P)
    stream = 5 * (2 * FP32 * H + 2 * FP32 + FP32 * H / S)
    heads = sum(2 * FP32 * n * D + 2 * FP32 * n + FP32 * D / S for n in (A, KV))
    assert booked["normOp"] == stream + heads + FP32 * KV * D + 2 * FP32 * KV


def test_the_gate_is_a_fact_beside_the_mlp(spec):
    """The MLP's width, projections and activation are its own; the gate is per_layer_gate_width."""
    assert spec["intermediate_size"] == W
    for kind in spec["ops"]:
        ops = spec["ops"][kind]
        # q, k, v, o; gate, up, down; the MLP's GELU; five norms on the stream
        assert {op: ops[op] for op in ("attMM", "attBMM", "softmax", "ffMM", "ffAct", "normOp")} == {
            "attMM": 4, "attBMM": 2, "softmax": 1, "ffMM": 3, "ffAct": 1, "normOp": 5,
        }  # fmt: skip
        facts = spec["variants"][kind]
        assert facts["per_layer_gate_width"] == P and facts["v_norm_weightless"] and not facts["qk_norm_weightless"]
        assert facts["act_saved"] == 1
        # the gate's projections are the dense feed-forward's parameters
        assert spec["params"]["kinds"][kind]["ffn_dense"] == 3 * H * W + 2 * H * P


def test_without_per_layer_inputs_there_is_no_gate():
    spec = run_census({**TINY, "hidden_size_per_layer_input": 0}, name="tiny-gemma4-nogate", seq_length=S)
    kind = spec["layers"][0]["kind"]
    facts = spec["variants"][kind]
    assert facts["per_layer_gate_width"] == 0 and facts["v_norm_weightless"]
    assert spec["measured"][kind]["bytes_per_token"]["ffAct"] == BF16 * W


def _check(spec) -> None:
    rows = price_points(spec, load_records(), load_settings())
    check_prices(spec, rows, load_records())  # raises beyond the records' tolerance at any measured point


@pytest.mark.parametrize("config", [TINY, {**TINY, "hidden_size_per_layer_input": 0}], ids=["gate", "nogate"])
def test_tiny_gemma4_is_priced_as_measured_across_settings(config):
    spec = run_census(config, name="tiny-gemma4", seq_length=S * 8, across=True)
    assert len(spec["measured_at"]) > 1
    _check(spec)


@pytest.mark.parametrize("model_type", ["gemma4_text", "gemma4"])
def test_the_registry_default_is_priced_as_measured_across_settings(model_type):
    from bench.bench_registry import default_config

    spec = run_census(default_config(model_type), name=model_type, seq_length=256, across=True)
    assert spec["variants"]["sliding_dense"]["per_layer_gate_width"] == 256 and spec["intermediate_size"] == 9216
    _check(spec)
