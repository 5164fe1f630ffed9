"""JetMoE's records price: its mixture of attention heads (q's and o's projections routed to the
top-k of its attention experts, run by transformers' loop over the experts: `attn_routed_slots`)
and its MoE MLP's experts run one at a time with gate and up in one projection
(`experts_loop`, `experts_fused_gate_up`: the activation keeps the fused output whole). The
census's bytes against a real layer are tests/census/test_census_jetmoe.py's; here, the facts,
the bytes worked by hand and the records' price at every point the census measures."""

from __future__ import annotations

import pytest
from support.layer_runs import priced_vs_measured

from speccat.census import run_census

BF16, FP32, I64 = 2, 4, 8
TINY = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, kv_channels=32, num_hidden_layers=2, vocab_size=256)
SEQ = 64


def default(**overrides) -> dict:
    """jetmoe's config class defaults as a config.json states them (bench/bench_registry.py default_config)."""
    from transformers import CONFIG_MAPPING

    return {**CONFIG_MAPPING["jetmoe"]().to_dict(), "model_type": "jetmoe", **overrides}


def router_scores_left(top_k: int) -> int:
    """Bytes per token the records leave out of the MoE router: its top-k softmax is kept in fp32
    where they price the compute dtype (a remainder from before the mixture of attention heads
    was priced)."""
    return (FP32 - BF16) * top_k


@pytest.fixture(scope="module")
def jetmoe():
    return run_census(default(), name="jetmoe", seq_length=256).to_dict()


def test_jetmoes_mixture_of_attention_heads_worked_by_hand(jetmoe):
    """jetmoe's defaults: h 2048, 16 kv heads of 128, top-2 of 8 experts (so 32 query heads, 16 per
    chosen expert), expert width 5632, bf16. attMM per token: the input the router, the q experts
    and kv_proj read (h); per slot on the hidden stream the q experts' gathered input, the o
    experts' output the gate's product keeps, its weighted output index_add sums (3·h), the bf16
    gate and the router's int64 top-k index, sort and gather indices and fp32 softmax output;
    the q experts' output the map's index_add sums and the o experts' gathered input (the heads'
    width 32·128 each). The MLP's experts keep their fused gate_up output whole in ffAct (2·5632
    a slot) beside the activation's output and the product in ffMM."""
    h, kv, head_dim, k, ff = 2048, 16, 128, 2, 5632
    heads = kv * k
    assert (jetmoe["hidden_size"], jetmoe["num_attention_heads"], jetmoe["num_experts_per_tok"]) == (h, heads, k)
    facts = jetmoe["variants"]["decoder"]
    assert (facts["attn_routed_slots"], facts["experts_loop"], facts["experts_fused_gate_up"]) == (k, True, True)
    measured = jetmoe["measured"]["decoder"]["bytes_per_token"]
    per_slot = 3 * BF16 * h + BF16 + 3 * I64 + FP32
    assert measured["attMM"] == BF16 * h + k * per_slot + 2 * BF16 * heads * head_dim
    assert measured["ffAct"] == k * 2 * BF16 * ff
    priced, total = priced_vs_measured(jetmoe, 256)["decoder"]
    assert priced == total - router_scores_left(k)


def test_jetmoe_is_priced_at_every_point_it_is_measured():
    """Across settings (a second length, cp 2, tp 2, each recompute switch and all): the records'
    price is what the census measured, less the MoE router's fp32 scores' remainder (on the hidden
    stream: a rank's share at cp 2, whole on each rank at tp 2)."""
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.points import measured_per_token, price_points
    from speccat.catalogue.records.settings import load_settings

    spec = run_census(default(**TINY), name="tiny-jetmoe", seq_length=SEQ, across=True).to_dict()
    rows = price_points(spec, load_records(), load_settings())
    measured = measured_per_token(spec)
    points = [r for r in rows if (r["kind"], r["point"]) in measured and r["kind"] == "decoder"]
    assert {"census", "cp 2", "tp 2", "recompute ffAct", "recompute all"} <= {r["point"] for r in points}
    k = spec["num_experts_per_tok"]
    for row in points:
        left = router_scores_left(k) / (2 if row["point"] == "cp 2" else 1)
        assert row["priced_per_token"] == pytest.approx(measured[row["kind"], row["point"]] - left, rel=1e-9), row["point"]
