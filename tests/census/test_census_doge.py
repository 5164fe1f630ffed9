"""doge's attention and residuals. dt_proj reads the values (a view of v_proj's output) to build
the dynamic mask (softplus, a product with A, exp: one bf16 element per kv head and token each),
which the layer hands its attention as `attention_mask`. speccat's flash kernel, as FlashAttention,
takes no mask (census/kernels/attention.py): nothing backward runs through reaches the mask, so
its chain and dt_proj's save of v are freed once the forward returns (census/measure/watcher.py
Held), in a run without hooks as in the census. v is the kernel's alone (`v_projected` false:
backward reaches no projection's save of it) and the chain keeps nothing (`attn_scaled_kept` 0:
no product with A is kept). The layer scales its residual by a learned vector before each branch
is added (`input_residual * residual`, `post_attention_residual * residual`: each product keeps
the bf16 residual, `stream_scale_attn_bytes` and `stream_scale_ff_bytes`,
census/measure/stream_scales.py)."""

from __future__ import annotations

import pytest
from bench.bench_registry import default_config as default
from support.layer_runs import priced_vs_measured, rotary_layer_bytes

from speccat.census import run_census

SEQ = 64
BF16, FP32 = 2, 4
TINY = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2, vocab_size=256)
FACTS = ("v_projected", "stream_scale_attn_bytes", "stream_scale_ff_bytes")



def facts_of(spec, kind: str) -> tuple:
    return tuple(spec["variants"][kind][name] for name in FACTS)


@pytest.fixture(scope="module")
def doge():
    return run_census(default("doge"), name="doge", seq_length=256).to_dict()


def test_doges_attention_and_residuals_worked_by_hand(doge):
    """doge's defaults: h 1024, 8 heads and 8 kv heads of 128, a dense gated MLP 2048 wide, bf16.
    attMM: the q, k, v projections' input (h) and the residual kept by input_residual's product
    (h), the mask's chain freed with dt_proj's save of v; attBMM: q, k and v (3·8·128); ffMM:
    the MLP's input (h), act output, up output and product (3·2048) and the residual kept by
    post_attention_residual's product (h)."""
    h, heads, head_dim, ff = 1024, 8, 128, 2048
    assert (doge["hidden_size"], doge["num_attention_heads"], doge["num_key_value_heads"], doge["intermediate_size"]) == (h, heads, heads, ff)
    assert facts_of(doge, "decoder") == (False, BF16, BF16)
    assert doge["variants"]["decoder"]["attn_scaled_kept"] == 0
    measured = doge["measured"]["decoder"]["bytes_per_token"]
    assert measured["attMM"] == BF16 * h + BF16 * h
    assert measured["attBMM"] == 3 * BF16 * heads * head_dim
    assert measured["ffMM"] == BF16 * h + 3 * BF16 * ff + BF16 * h
    priced, total = priced_vs_measured(doge, 256)["decoder"]
    assert priced == total


def test_doge_is_priced_at_every_point_it_is_measured():
    """Across settings (a second length, cp 2, tp 2, each recompute switch and all): the records'
    price is what the census measured."""
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.points import measured_per_token, price_points
    from speccat.catalogue.records.settings import load_settings

    spec = run_census(default("doge", **TINY), name="tiny-doge", seq_length=SEQ, across=True).to_dict()
    rows = price_points(spec, load_records(), load_settings())
    measured = measured_per_token(spec)
    points = [r for r in rows if (r["kind"], r["point"]) in measured and r["kind"] == "decoder"]
    assert {"census", "cp 2", "tp 2", "recompute attBMM", "recompute all"} <= {r["point"] for r in points}
    for row in points:
        assert row["priced_per_token"] == pytest.approx(measured[row["kind"], row["point"]], rel=1e-9), row["point"]


@pytest.mark.parametrize(
    ("model_type", "facts"),
    [("doge", (False, BF16, BF16)), ("llama", (False, 0, 0))],
    ids=["doge", "llama-without"],
)
def test_the_price_is_what_a_real_layer_keeps(model_type, facts):
    """A tiny model's layer 0 run for real on CPU in bf16, its attention through speccat's kernel:
    the bytes it saves per token and still holds once the forward returned, with the layer's input
    where an op keeps it, equal what the census measured and the records' price of its kind."""
    config = default(model_type, **TINY)
    spec = run_census(config, name=f"tiny-{model_type}", seq_length=SEQ).to_dict()
    (kind,) = {group["kind"] for group in spec["layers"]}
    assert facts_of(spec, kind) == facts
    priced, measured = priced_vs_measured(spec, SEQ)[kind]
    # the real run leaves out the layer's input, which input_residual's product keeps (the census counts it)
    layer_input = BF16 * TINY["hidden_size"] if facts[1] else 0
    assert measured == rotary_layer_bytes(config, SEQ) + layer_input
    assert priced == measured
