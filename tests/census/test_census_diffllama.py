"""diffllama's differential attention: the kernel called twice with the same q and k (each call
over one half of v, repeated to the kv heads), the two outputs joined by torch.cat, one half of
the join multiplied by a learned λ (which keeps the join), a weightless RMS norm over each pair
of heads, and o_proj reading the norm's output scaled. The census reads each off what ran
(census/measure/repeated_attention.py, census/measure/inner_norms.py): `qk_reused`,
`attn_out_joined`, `attn_out_norm` with `attn_out_norm_rows` and `attn_out_norm_weightless`;
the records price q and k once, the join, and the group norm's fp32 input and one statistic per
head pair."""

from __future__ import annotations

import pytest
from bench.bench_registry import default_config as default
from support.layer_runs import priced_vs_measured, rotary_layer_bytes

from speccat.census import run_census

SEQ = 64
BF16, FP32 = 2, 4
TINY = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_hidden_layers=2, vocab_size=256)
FACTS = ("qk_reused", "attn_out_joined", "attn_out_norm", "attn_out_norm_rows", "attn_out_norm_weightless")



def facts_of(spec, kind: str) -> tuple:
    return tuple(spec["variants"][kind][name] for name in FACTS)


@pytest.fixture(scope="module")
def diffllama():
    return run_census(default("diffllama"), name="diffllama", seq_length=256).to_dict()


def test_diffllamas_attention_worked_by_hand(diffllama):
    """diffllama's defaults: h 2048, 32 heads of 64 and 32 kv heads, bf16. Per token the two flash
    calls keep q and k once (2·32·64 bf16), each its own v (its half of the kv heads repeated
    back to 32: 32·64 bf16 each), and each its output and log-sum-exp (32·64 bf16 + 32 fp32).
    The λ product keeps the join of both outputs (2·32·64 bf16); the group norm, over 16 pairs
    of heads (128 wide), upcasts and has no weight: its fp32 input (32·64) and one fp32 rstd
    per pair; o_proj keeps the scaled norm output (32·64 bf16) beside the q, k, v projections'
    input (h bf16). λ's scalars add 10 bytes a call, not a token (the two fp32 exps, the bf16 λ
    the product keeps), which the records leave out."""
    h, heads, head_dim = 2048, 32, 64
    assert (diffllama["hidden_size"], diffllama["num_attention_heads"], diffllama["num_key_value_heads"]) == (h, heads, heads)
    assert facts_of(diffllama, "decoder") == (1, 2, 1, heads // 2, True)
    measured = diffllama["measured"]["decoder"]["bytes_per_token"]
    width = heads * head_dim
    assert measured["attBMM"] == BF16 * (2 * width) + 2 * BF16 * width
    assert measured["softmax"] == 2 * (BF16 * width + FP32 * heads)
    assert measured["attMM"] == BF16 * h + 2 * BF16 * width + BF16 * width + (2 * FP32 + BF16) / 256
    # two stream norms (fp32 input, rstd, bf16 normalised input) and the group norm
    assert measured["normOp"] == 2 * ((FP32 + BF16) * h + FP32) + FP32 * width + FP32 * heads // 2
    priced, total = priced_vs_measured(diffllama, 256)["decoder"]
    assert priced == total - (2 * FP32 + BF16) / 256


def test_diffllama_is_priced_at_every_point_it_is_measured():
    """Across settings (a second length, cp 2, each recompute switch and all): the records' price
    equals what the census measured."""
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.points import measured_per_token, price_points
    from speccat.catalogue.records.settings import load_settings

    spec = run_census(default("diffllama", **TINY), name="tiny-diffllama", seq_length=SEQ, across=True).to_dict()
    rows = price_points(spec, load_records(), load_settings())
    measured = measured_per_token(spec)
    points = [r for r in rows if (r["kind"], r["point"]) in measured and r["kind"] == "decoder"]
    assert {"census", "cp 2", "recompute normOp", "recompute all"} <= {r["point"] for r in points}
    for row in points:
        # λ's scalars: 10 bytes a call, outside the records, over the fewest tokens a point runs
        # (half SEQ: the second length, cp 2's share)
        scalars = (2 * FP32 + BF16) / (SEQ // 2)
        assert measured[row["kind"], row["point"]] - scalars - 1e-9 <= row["priced_per_token"] <= measured[row["kind"], row["point"]], row["point"]


@pytest.mark.parametrize(
    ("model_type", "facts"),
    [("diffllama", (1, 2, 1, 2, True)), ("llama", (0, 0, 0, 0, False))],
    ids=["diffllama", "llama-without"],
)
def test_the_price_is_what_a_real_layer_keeps(model_type, facts):
    """A tiny model's layer 0 run for real on CPU in bf16: the bytes it saves per token equal what
    the census measured and the records' price of its kind (4 heads: the group norm's 2 rows),
    less λ's scalars (10 bytes a call, not a token)."""
    config = default(model_type, **TINY)
    spec = run_census(config, name=f"tiny-{model_type}", seq_length=SEQ).to_dict()
    (kind,) = {group["kind"] for group in spec["layers"]}
    assert facts_of(spec, kind) == facts
    priced, measured = priced_vs_measured(spec, SEQ)[kind]
    scalars = (2 * FP32 + BF16) / SEQ if facts[0] else 0
    assert priced == measured - scalars == rotary_layer_bytes(config, SEQ) - scalars
