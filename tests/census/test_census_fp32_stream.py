"""ergo's hidden stream in fp32: its embedding, norms and residual gates are kept in fp32
(_keep_in_fp32_modules_strict) while its attention and MLP compute in bf16, so:

- its stream norms are handed the fp32 stream and keep it as it is (`hidden_states.float()` is
  no op): `norm_upcast` is read as the norm keeping its input in fp32, not only as a cast, and
  each keeps its fp32 input, its fp32 normalised input and its statistic (8h + 4 bytes a token);
- its residual gates (ErgoResidualGate, a module of per-channel parameters: stream code) keep
  the fp32 output of the post-norm before them, booked to the branch that norm closes (a stream
  norm is never the child that ran last): `stream_code_attn_bytes` 4, `stream_code_ff_bytes` 4;
  their sigmoid and softplus of the weight, vectors kept once whatever the tokens, are no rows;
- the gradients its backward holds are fp32 (the working set's widths in fp32, not the
  embedding's dtype taken for the compute dtype).

- its MoE layers run a learned RMS norm on each route's output before the weighted sum
  (ErgoExpertNorm inside the experts: a norm over their slots, no stream norm), whose weight holds
  a row per expert that each slot gathers: `experts_out_norms` 1, `experts_norm_weight_bytes` 4;
  its router casts its fp32 weight to bf16 and back to fp32 for the matmul, which keeps that
  copy: `router_weight_fp32`, a row per expert.

Checked worked by hand from the config's dims, against a real CPU forward and backward of the
tiny model's dense and MoE layers, and the price of each kind against the census.
"""

from __future__ import annotations

import pytest
import torch
from bench.bench_registry import default_config as default
from support.layer_runs import priced_vs_measured, saves_and_grads, tiny_model

from speccat.census import run_census

FP32 = 4
SEQ = 32
TINY = dict(
    hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, first_dense_intermediate_size=112,
    moe_intermediate_size=24, shared_intermediate_size=40, num_experts=4, num_experts_per_tok=2, vocab_size=512,
    layer_types=["sliding_attention", "full_attention"], mlp_layer_types=["dense", "sparse"],
)
FACTS = ("norm_upcast", "norm_scale_fp32", "norm_fp32_extra", "stream_code_attn_bytes", "stream_code_ff_bytes")


@pytest.fixture(scope="module")
def tiny():
    config = default("ergo", **TINY)
    spec = run_census(config, name="tiny-ergo", seq_length=SEQ).to_dict()
    (dense,) = {group["kind"] for group in spec["layers"] if "dense" in group["kind"]}
    return config, spec, dense


def moe_kind(spec) -> str:
    (moe,) = {group["kind"] for group in spec["layers"] if "moe" in group["kind"]}
    return moe


def real_layer_bytes(config: dict, index: int, rotary: bool) -> float:
    """Bytes per token a real CPU forward and backward of the tiny model's layer `index` keeps on an
    fp32 stream, its attention through speccat's kernel as the census runs it: every storage but
    the parameters and the rotary tables, the layer's input too (its first norm keeps it as it is)."""
    from speccat.census.kernels.attention import ATTENTION_IMPL, register

    register()
    model = tiny_model({**config, "attn_implementation": ATTENTION_IMPL}, torch.bfloat16)
    assert model.model.embed_tokens.weight.dtype == torch.float32
    torch.manual_seed(1)
    x = torch.randn(1, SEQ, config["hidden_size"], dtype=torch.float32, requires_grad=True)
    tables = model.model.rotary_emb(x, torch.arange(SEQ).unsqueeze(0), layer_type=config["layer_types"][index]) if rotary else None
    kept, _ = saves_and_grads(model, model.model.layers[index], x, position_embeddings=tables)
    aside = {t.untyped_storage()._cdata for t in tables or ()}
    # saves_and_grads leaves the layer's input out; the census counts it where an op inside keeps it
    return (sum(t.untyped_storage().nbytes() for k, t in kept.items() if k not in aside) + x.untyped_storage().nbytes()) / SEQ


def norm_bytes(h: int, heads: int, kv_heads: int, head_dim: int) -> int:
    """Per token, by hand: four stream norms on the fp32 stream (their fp32 input, the fp32
    normalised input the weight's product keeps, the fp32 rstd) and the QK-norms, which cast q's
    and k's bf16 heads to fp32 and keep the same per head."""
    return 4 * (2 * FP32 * h + FP32) + (heads + kv_heads) * (2 * FP32 * head_dim + FP32)


def test_the_dense_layer_states_its_fp32_stream(tiny):
    config, spec, dense = tiny
    h, heads, kv_heads = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    stated = {name: spec["variants"][dense][name] for name in FACTS}
    assert stated == dict(norm_upcast=True, norm_scale_fp32=True, norm_fp32_extra=0, stream_code_attn_bytes=4, stream_code_ff_bytes=4)
    measured = spec["measured"][dense]["bytes_per_token"]
    assert measured["normOp"] == norm_bytes(h, heads, kv_heads, h // heads)
    # nothing of the gates' is booked to no child: their per-channel vectors, kept once whatever
    # the tokens (8 fp32 vectors of h per layer call), are the branches'
    assert measured.get("other", 0) == 0
    # the working set's hidden-wide gradients are fp32
    widths = {(width, dtype) for width, dtype, _ in spec["measured"][dense]["working_set"]["widths"]}
    assert (h, "float32") in widths and (h, "compute") not in widths


def test_a_real_dense_layer_keeps_what_the_census_measured(tiny):
    """A tiny ergo built with real bf16 weights (its fp32 modules in fp32) on CPU: its dense
    layer 0 (sliding, rotary) keeps per token what the census measured."""
    config, spec, dense = tiny
    assert real_layer_bytes(config, 0, rotary=True) == sum(spec["measured"][dense]["bytes_per_token"].values())


def test_the_moe_layer_states_its_expert_norms(tiny):
    """Per token, by hand: beside the four stream norms, the shared expert's norm (a stream norm
    on its bf16 output, upcast) and the QK-norms, each of the top-k slots' norm keeps its fp32
    input, rstd and normalised rows, the fp32 weight row it gathered and the slot's int64 expert
    index; the router's weight copy is a row per expert."""
    config, spec, _ = tiny
    moe = moe_kind(spec)
    h, heads, kv_heads, k = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"], config["num_experts_per_tok"]
    stated = spec["variants"][moe]
    assert (stated["experts_out_norms"], stated["experts_norm_weight_bytes"], stated["router_weight_fp32"]) == (1, 4, config["num_experts"])
    slot_norm = 2 * FP32 * h + FP32 + FP32 * h + 8
    shared_norm = 2 * FP32 * h + FP32
    assert spec["measured"][moe]["bytes_per_token"]["normOp"] == norm_bytes(h, heads, kv_heads, h // heads) + shared_norm + k * slot_norm
    # the dense layer has none of them
    _, _, dense = tiny
    assert (spec["variants"][dense]["experts_out_norms"], spec["variants"][dense]["experts_norm_weight_bytes"]) == (0, 0)


def test_a_real_moe_layer_keeps_what_the_census_measured(tiny):
    """Its MoE layer 1 (full attention, no rotary) run for real: what the census measured, but the
    loop's per-expert counts, which the census answers with the assumed even loads (an int32 per
    expert hit: here every expert, 4 × 4 bytes over the tokens)."""
    config, spec, _ = tiny
    moe = moe_kind(spec)
    assert real_layer_bytes(config, 1, rotary=False) == pytest.approx(sum(spec["measured"][moe]["bytes_per_token"].values()), abs=4 * 4 / SEQ)


def test_the_dense_kind_is_priced(tiny):
    """To the byte but the gates' vectors, kept once whatever the tokens and not priced: per gate
    the sigmoid of its weight, the square root and the exponential of the residual's factor and
    that factor, 4 fp32 vectors of h, 8 a layer call (48 bytes a token at 32 tokens, 0.1% at the
    default's 8192 and 256)."""
    config, spec, dense = tiny
    priced, measured = priced_vs_measured(spec, SEQ)[dense]
    assert priced + 8 * FP32 * config["hidden_size"] / SEQ == measured
    # the MoE kind: within 2% (those vectors, and the router's constants: its copy's bf16 round trip
    # is priced as one fp32 copy)
    priced, measured = priced_vs_measured(spec, SEQ)[moe_kind(spec)]
    assert priced == pytest.approx(measured, rel=2e-2)


def test_ergo_default_worked_by_hand():
    """At its default (h 8192, 64 heads, 8 kv heads of 128, 256 tokens): its dense layer's norms
    and the residual gates' fp32 rows, and the final norm's end, kept as a layer's norm is."""
    spec = run_census(default("ergo"), name="ergo", seq_length=256).to_dict()
    (dense,) = {group["kind"] for group in spec["layers"] if "dense" in group["kind"]}
    assert spec["measured"][dense]["bytes_per_token"]["normOp"] == norm_bytes(8192, 64, 8, 128) == 336176
    assert (spec["variants"][dense]["stream_code_attn_bytes"], spec["variants"][dense]["stream_code_ff_bytes"]) == (4, 4)
    assert spec["ends"]["bytes_per_token"]["final_norm"] == 2 * FP32 * 8192 + FP32
    kinds = {group["kind"] for group in spec["layers"]}
    assert kinds == {dense, "sliding_moe", "full_moe"}
    for kind in kinds:
        priced, measured = priced_vs_measured(spec, 256)[kind]
        assert priced == pytest.approx(measured, rel=1e-2)
    # its MoE layers: the stream norms, the shared expert's, the QK-norms and the 8 routes' norms
    # of 12 × 8192 + 12 bytes each, a token
    for kind in ("sliding_moe", "full_moe"):
        assert spec["variants"][kind]["experts_out_norms"] == 1
        assert spec["measured"][kind]["bytes_per_token"]["normOp"] == 336176 + 65540 + 8 * (12 * 8192 + 12) == 1188244
