"""Llama-4 (llama4, llama4_text): routed experts outside the experts interface, run densely, and
layers built alike that its config tells to run differently (NoPE layers).

- Scout's census, its kinds and their layer counts read from its config by hand;
- a tiny llama4's measured bytes against a real CPU forward whose autograd graph is walked;
- the records' prices of both within the records' tolerance at every point measured.
"""

from __future__ import annotations

import pytest
import torch
from conftest import load_shipped
from support.layer_runs import saved_by_graph

from speccat.catalogue.records.ends import load_ends
from speccat.catalogue.records.points import check_prices, price_ends, price_points, worst_ratio
from speccat.census import run_census

SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"

# hidden 64, expert width 24, dense width 96 (no projection as wide as a sequence the census runs
# at, 32 or 16 tokens, on any rank: the census would take it for attention scores); every second layer MoE (moe_layers 1, 3, 5, 7),
# every fourth without rope (no_rope_layer_interval 4: layers 3 and 7), chunked attention on the
# rope layers (layer_types: chunked_attention where rope is used)
TINY = {
    "model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 24, "intermediate_size_mlp": 96,
    "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 128,
    "attention_chunk_size": 8192, "max_position_embeddings": 4096,
}  # fmt: skip


@pytest.fixture(scope="module")
def scout():
    return run_census(load_shipped(SCOUT), name=SCOUT, across=True).to_dict()


def test_scout_states_the_kinds_and_counts_of_its_config(scout):
    # text_config: 48 layers, interleave_moe_layer_step 1 (every layer MoE: moe_layers 0..47);
    # no_rope_layers [] → the class's default, one NoPE layer every no_rope_layer_interval (4)
    # layers: 3, 7, ..., 47 (12 layers) keep no rope, no QK-norm and tune q's temperature; the
    # other 36 use rope and an L2 QK-norm and are chunked_attention by the class's layer_types
    assert scout["layers"] == [{"kind": "chunked_moe", "count": 3}, {"kind": "full_moe", "count": 1}] * 12
    assert sum(g["count"] for g in scout["layers"] if g["kind"] == "chunked_moe") == 36
    assert sum(g["count"] for g in scout["layers"] if g["kind"] == "full_moe") == 12
    # hidden 5120, 40/8 heads of 128, 16 local experts of width 8192, top-1, one shared expert (8192)
    facts = {k: scout[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "num_shared_experts", "vocab_size")}
    assert facts == {"hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                     "num_experts": 16, "num_experts_per_tok": 1, "moe_intermediate_size": 8192, "num_shared_experts": 1, "vocab_size": 202048}  # fmt: skip
    assert "intermediate_size" not in scout  # every layer MoE: intermediate_size_mlp is unused
    for kind in ("chunked_moe", "full_moe"):
        assert scout["flavours"][kind] == {"attention": "full", "ffn": "moe"}
        assert scout["variants"][kind]["experts_dense"] is True
        assert scout["measured"][kind]["experts_impl"] == "dense"
    assert scout["variants"]["chunked_moe"]["qk_norm_weightless"] is True
    assert scout["variants"]["full_moe"]["qk_norm_weightless"] is False


def test_scout_keeps_every_expert_for_every_token(scout):
    """Dense dispatch, per token and expert (bf16): the gate_up output (2 × 8192) to ffAct; the
    repeated input, the scaled input (5120 each), the score, the activation output and the
    product (8192 each) to ffMM; besides, the shared expert (input, three of 8192; its gate
    output) and the router (fp32 sigmoid of 16 scores, one int64 index)."""
    h, w, e = 5120, 8192, 16
    measured = scout["measured"]["full_moe"]["bytes_per_token"]
    assert measured["ffAct"] == e * 2 * (2 * w) + 2 * w
    assert measured["ffMM"] == e * 2 * (h + h + 1 + w + w) + (2 * h + 2 * 3 * w) + (4 * e + 8)
    # the L2 QK-norm of the rope layers: q and k (40 + 8 heads of 128) in fp32, one fp32 statistic per head
    assert scout["measured"]["chunked_moe"]["bytes_per_token"]["normOp"] - measured["normOp"] == 4 * 48 * 128 + 4 * 48


def _priced_within_tolerance(spec, records, grid) -> float:
    rows = price_points(spec, records, grid) + price_ends(spec, records, grid, load_ends(records))
    check_prices(spec, rows, records)
    return worst_ratio(spec, rows)[2]


def test_scout_is_priced_within_the_tolerance_at_every_point(scout, records, grid):
    assert len(scout["measured_at"]) >= 12
    assert abs(_priced_within_tolerance(scout, records, grid) - 1) < 0.001


def test_the_fast_path_prices_dense_dispatch_as_the_direct_evaluator(scout, records, grid):
    """Every setting of the grid and every switch set, bit for bit: the routed slot's dense-dispatch
    terms and the weightless QK-norm are evaluated alike by both (docs/pricing.md)."""
    from speccat.catalogue.records.pricing import price_layers

    fast = price_layers(scout, records, grid, "fast")
    assert fast.same_bits(price_layers(scout, records, grid, "direct"))


def test_a_tiny_llama4_books_what_its_real_graph_holds(records, grid):
    """Each kind's census bytes equal what a real CPU forward of one of its layers keeps."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from speccat.census.kernels.attention import ATTENTION_IMPL

    seq = 32
    spec = run_census(TINY, name="tiny-llama4", seq_length=seq, across=True).to_dict()
    # moe_layers 1, 3, 5, 7; NoPE layers 3, 7: dense rope layers 0, 2, 4, 6; MoE rope 1, 5; MoE NoPE 3, 7
    kinds = [k for g in spec["layers"] for k in [g["kind"]] * g["count"]]
    assert kinds == ["full_dense", "chunked_moe", "full_dense", "full_moe"] * 2
    assert spec["intermediate_size"] == 96 and spec["moe_intermediate_size"] == 24 and spec["num_experts"] == 4
    config = AutoConfig.for_model(**TINY)
    config._attn_implementation = ATTENTION_IMPL
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.train()
    fixed = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
    for kind, index in (("full_dense", 0), ("chunked_moe", 1), ("full_moe", 3)):
        x = torch.randn(1, seq, 64, dtype=torch.bfloat16, requires_grad=True)
        rotary = model.model.rotary_emb(x, torch.arange(seq).unsqueeze(0))
        out = model.model.layers[index](x, position_embeddings=rotary, attention_mask=None)
        out = out[0] if isinstance(out, tuple) else out
        left_out = fixed | {rotary.untyped_storage()._cdata, out.untyped_storage()._cdata}
        real = sum(t.untyped_storage().nbytes() for key, t in saved_by_graph(out).items() if key not in left_out)
        assert sum(spec["measured"][kind]["bytes_per_token"].values()) * seq == real, kind
    assert abs(_priced_within_tolerance(spec, records, grid) - 1) < records.tolerance


def test_per_layer_lists_are_read_as_each_layers_values():
    """Lists as long as the stack give each layer its value; a strictly increasing list of layer
    indices gives membership; other lists (token ids, shorter lists) give nothing."""
    from types import SimpleNamespace

    from speccat.census.structure.shapes import layer_config_values

    config = SimpleNamespace(
        no_rope_layers=[1, 1, 1, 0], moe_layers=[1, 3], layer_types=["a", "a", "b", "b"],
        eos_token_id=[200001, 200007], architectures=["X"], _private=[0, 0, 0, 1],
    )  # fmt: skip
    values = layer_config_values(config, 4)
    assert values[0] == (("layer_types", "a"), ("moe_layers", False), ("no_rope_layers", 1))
    assert values[3] == (("layer_types", "b"), ("moe_layers", True), ("no_rope_layers", 0))
    assert len(set(values)) == 4
    # every layer an index ([0, 1, 2, 3]) is membership, the same for all: no split
    assert len(set(layer_config_values(SimpleNamespace(moe_layers=[0, 1, 2, 3]), 4))) == 1
