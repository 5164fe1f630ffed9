"""Norms inside the attention and the MLP (attn_out_norm, ff_down_norm): bitnet's attn_sub_norm
on the attention's output before o_proj, and its ffn_sub_norm on act(gate)·up before down_proj.
The census reads each off what ran (a norm after the child's attention kernel, before its
output projection; a norm after the MLP's activation whose output the MLP's projection reads,
census/measure/inner_norms.py), counts neither among the stream norms, and the records price
each as a norm of its width inside the tensor-parallel region, and o_proj's copy of the attention
norm's output."""

from __future__ import annotations

import pytest
from bench.bench_registry import default_config as default
from support.layer_runs import priced_vs_measured, rotary_layer_bytes

from speccat.census import run_census

SEQ = 64
BF16, FP32 = 2, 4
TINY = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2, vocab_size=256)



def sub_norm_facts(spec, kind: str) -> tuple[int, int]:
    facts = spec["variants"][kind]
    return facts["attn_out_norm"], facts["ff_down_norm"]


@pytest.fixture(scope="module")
def bitnet():
    return run_census(default("bitnet"), name="bitnet", seq_length=256).to_dict()


def test_bitnets_sub_norms_worked_by_hand(bitnet):
    """bitnet (h 2560, 20 heads of 128, MLP 6912 wide, relu²): its RMS norms cast their input to
    fp32 and apply the weight in bf16, so each keeps per token its fp32 input, its bf16
    normalised input and one fp32 rstd: 6 bytes an element and 4 more. Two norms on the stream
    (h wide), attn_sub_norm on the heads' output (20·128 wide) and ffn_sub_norm on the MLP's
    product (6912 wide). o_proj keeps attn_sub_norm's bf16 output beside the q, k, v
    projections' input (2·h); down_proj keeps ffn_sub_norm's output in place of the product."""
    h, heads, head_dim, ff = 2560, 20, 128, 6912
    assert (bitnet["hidden_size"], bitnet["num_attention_heads"], bitnet["intermediate_size"]) == (h, heads, ff)
    assert sub_norm_facts(bitnet, "decoder") == (1, 1)
    assert bitnet["ops"]["decoder"]["normOp"] == 2  # the stream norms only
    measured = bitnet["measured"]["decoder"]["bytes_per_token"]
    norm = (FP32 + BF16) * 1  # bytes an element of a norm's width
    assert measured["normOp"] == 2 * (norm * h + FP32) + (norm * heads * head_dim + FP32) + (norm * ff + FP32)
    assert measured["attMM"] == BF16 * h + BF16 * heads * head_dim
    # the MLP: its input, relu²'s output and up's output (the product keeps both), and the
    # sub-norm's output down_proj keeps: as a plain gated MLP's product would be
    assert measured["ffMM"] == BF16 * h + 3 * BF16 * ff
    priced, total = priced_vs_measured(bitnet, 256)["decoder"]
    assert priced == total


def test_bitnet_is_priced_at_every_point_it_is_measured():
    """Across settings (a second length, cp 2, each recompute switch and all): the records' price
    equals what the census measured. Recomputing MLA's up-projections (attUp) keeps down_proj's
    input, the MLP norm's output: a norm's output a projection keeps is an up-projection's input
    only in a child whose kernel runs after it (census/measure/booking.py)."""
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.points import measured_per_token, price_points
    from speccat.catalogue.records.settings import load_settings

    config = default("bitnet", **TINY)
    spec = run_census(config, name="tiny-bitnet", seq_length=SEQ, across=True).to_dict()
    rows = price_points(spec, load_records(), load_settings())
    measured = measured_per_token(spec)
    points = [r for r in rows if (r["kind"], r["point"]) in measured and r["kind"] == "decoder"]
    assert {"census", "cp 2", "recompute attUp", "recompute normOp", "recompute all"} <= {r["point"] for r in points}
    for row in points:
        assert row["priced_per_token"] == pytest.approx(measured[row["kind"], row["point"]], rel=1e-9), row["point"]
    census = next(r["priced_per_token"] for r in points if r["point"] == "census")
    assert next(r["priced_per_token"] for r in points if r["point"] == "recompute attUp") == census


@pytest.mark.parametrize(
    ("model_type", "facts"),
    [("bitnet", (1, 1)), ("llama", (0, 0))],
    ids=["bitnet", "llama-without"],
)
def test_the_price_is_what_a_real_layer_keeps(model_type, facts):
    """A tiny model's layer 0 run for real on CPU in bf16: the bytes it saves per token equal what
    the census measured and the records' price of its kind."""
    config = default(model_type, **TINY)
    spec = run_census(config, name=f"tiny-{model_type}", seq_length=SEQ).to_dict()
    (kind,) = {group["kind"] for group in spec["layers"]}
    assert sub_norm_facts(spec, kind) == facts
    priced, measured = priced_vs_measured(spec, SEQ)[kind]
    assert priced == measured == rotary_layer_bytes(config, SEQ)


def test_a_norm_of_the_hidden_width_inside_the_attention_is_no_stream_norm():
    """bitnet's heads are as wide as its hidden states (20·128 = 2560): attn_sub_norm normalises
    the attention's output, not the stream. Priced as a stream norm it would be kept whole on
    every tensor-parallel rank; as the attention's, it is divided with the heads."""
    config = default("bitnet", **TINY)
    spec = run_census(config, name="tiny-bitnet", seq_length=SEQ).to_dict()
    facts = spec["variants"]["decoder"]
    as_stream = dict(spec, variants={"decoder": dict(facts, attn_out_norm=0)}, ops={"decoder": dict(spec["ops"]["decoder"], normOp=3)})
    # at one rank both price the same bytes, save o_proj's copy of the norm's output (a·d bf16)
    heads, head_dim = TINY["num_attention_heads"], TINY["hidden_size"] // TINY["num_attention_heads"]
    assert priced_vs_measured(spec, SEQ)["decoder"][0] - priced_vs_measured(as_stream, SEQ)["decoder"][0] == BF16 * heads * head_dim
