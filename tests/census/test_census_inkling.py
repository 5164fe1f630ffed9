"""inkling_text's code outside what other MoE models run, which the records price by facts:

- its shared experts, one module holding both experts stacked in 3-D weights of its own and run
  as batched matmuls, each scaled by the router's weight for it (census/describe/
  feed_forward_facts.py shared_stacked): shared_expert_intermediate_size experts × width,
  shared_kept and shared_act_saved counted per expert's row;
- its router's weight, cast to fp32 for the matmul and kept, with a row per routed expert and
  per shared expert (router_weight_fp32: 256 + 2);
- its embedding, an nn.Embedding that runs an RMS norm on its own output (census/measure/ends.py:
  the ends' embedding_norms), kept as the layers' norms are.

Each fact is checked against a real CPU forward and backward of the module that keeps it, the
default config's bytes are worked by hand from its dims, and the price against the census.
"""

from __future__ import annotations

import pytest
import torch
from bench.bench_registry import default_config as default
from support.layer_runs import priced_vs_measured, tiny_model

from speccat.census import run_census

BF16, FP32, I64, BOOL = 2, 4, 8, 1
SEQ = 64
TINY = dict(
    hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64, swa_num_attention_heads=4,
    swa_num_key_value_heads=2, swa_head_dim=64, sliding_window_size=32, rel_extent=64, layer_types=["hybrid_sliding", "hybrid"],
    mlp_layer_types=["sparse", "sparse"], intermediate_size=256, moe_intermediate_size=192, n_routed_experts=8, num_experts_per_tok=2,
    n_shared_experts=2, vocab_size=512,
)
FACTS = ("shared_kept", "shared_act_saved", "router_weight_fp32")



def facts(spec, kind: str) -> dict[str, int]:
    return {name: int(spec["variants"][kind][name]) for name in FACTS}


def cp_keys_gap(cp: int) -> float:
    """Bytes per token of the sequence that the records price at a context-parallel rank beyond
    what the census measures there, worked from TINY's dims: the records price a rank's s/cp
    queries over all s keys, the census runs a rank as the layer at s/cp tokens, over s/cp keys
    (census/across.py). What each layer keeps per (query, key) pair differs so: its relative
    bias's int64 gather index and bool mask (one each for every head) and the bias the kernel
    keeps, bf16 per head: (s/cp)·(s − s/cp) pairs over the sequence's s tokens."""
    pairs = (SEQ // cp) * (SEQ - SEQ // cp) / SEQ
    return (I64 + BOOL + BF16 * TINY["num_attention_heads"]) * pairs


@pytest.fixture(scope="module")
def inkling():
    return run_census(default("inkling_text"), name="inkling_text", seq_length=256).to_dict()


@pytest.fixture(scope="module")
def tiny():
    config = default("inkling_text", **TINY)
    return config, run_census(config, name="tiny-inkling", seq_length=SEQ).to_dict()


def test_inkling_default_worked_by_hand(inkling):
    """inkling_text's defaults: h 6144, 256 routed experts 3072 wide (top-6) and 2 shared experts
    of that width stacked in one module; per token at 256 tokens, bf16."""
    h, width, shared, routed = 6144, 3072, 2, 256
    assert (inkling["shared_expert_intermediate_size"], inkling["num_shared_experts"]) == (shared * width, shared)
    for kind in ("sliding_moe", "full_moe"):
        # what the shared experts' own code keeps of their width: up, the activation's output,
        # their product, the product scaled by the router's weight (the down matmul's input): 4;
        # their SiLU keeps its input, the gate: 1. The router's weight copy has a row per
        # routed and per shared expert.
        assert facts(inkling, kind) == dict(shared_kept=4, shared_act_saved=1, router_weight_fp32=routed + shared)
        priced, measured = priced_vs_measured(inkling, 256)[kind]
        assert priced == pytest.approx(measured, rel=1e-2)
    # the embedding's end: the ids, and its RMS norm's fp32 input copy, its rstd and the bf16
    # normalised output the weight's product keeps, as the final norm keeps them
    ends = inkling["ends"]
    assert ends["embedding_norms"] == 1
    assert ends["bytes_per_token"]["embedding"] == I64 + (FP32 + BF16) * h + FP32
    assert ends["bytes_per_token"]["final_norm"] == (FP32 + BF16) * h + FP32


def kept(module, *args) -> dict[int, torch.Tensor]:
    """The storages module(*args) saves for backward (run forward and backward once), its
    parameters, its tensor inputs and its outputs aside."""
    saved = {}

    def pack(t):
        saved.setdefault(t.untyped_storage()._cdata, t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(*args)
    outs = out if isinstance(out, tuple) else (out,)
    sum(o.float().sum() for o in outs if isinstance(o, torch.Tensor) and o.requires_grad).backward()
    aside = {t.untyped_storage()._cdata for t in (*module.parameters(), *args, *outs) if isinstance(t, torch.Tensor)}
    return {k: t for k, t in saved.items() if k not in aside}


def test_each_fact_is_what_a_real_module_keeps(tiny):
    """A tiny inkling built with real bf16 weights on CPU: each module run forward and backward
    alone, what autograd saved equals what the facts say."""
    config, spec = tiny
    stated = facts(spec, "full_moe")
    h, width, shared = config["hidden_size"], config["moe_intermediate_size"], config["n_shared_experts"]
    assert (spec["shared_expert_intermediate_size"], spec["num_shared_experts"]) == (shared * width, shared)
    model = tiny_model(config, torch.bfloat16)
    moe = model.model.layers[1].mlp
    torch.manual_seed(1)
    x = torch.randn(1, SEQ, h, dtype=torch.bfloat16, requires_grad=True)
    gammas = torch.rand(1, SEQ, shared, dtype=torch.bfloat16, requires_grad=True)
    # the shared experts: their total width in bf16, shared_kept + shared_act_saved times a token
    shared_bytes = sum(t.untyped_storage().nbytes() for t in kept(moe.shared_experts, x, gammas).values())
    assert shared_bytes == (stated["shared_kept"] + stated["shared_act_saved"]) * shared * width * BF16 * SEQ
    # the router: among what it keeps, its weight's fp32 copy (saved transposed), a row per
    # routed and per shared expert
    copies = [t for t in kept(moe.gate, x).values() if t.dtype == torch.float32 and sorted(t.shape) == sorted((stated["router_weight_fp32"], h))]
    assert stated["router_weight_fp32"] == config["n_routed_experts"] + shared and len(copies) == 1
    # the embedding: the ids (an input, counted here) and what its norm keeps, per token
    ids = torch.randint(0, config["vocab_size"], (1, SEQ))
    embedding = kept(model.model.embed_tokens, ids)
    norm = (FP32 + BF16) * h + FP32
    assert sum(t.untyped_storage().nbytes() for t in embedding.values()) + I64 * SEQ == (I64 + spec["ends"]["embedding_norms"] * norm) * SEQ
    assert spec["ends"]["embedding_norms"] == 1


def test_tiny_inkling_is_priced_at_every_point(tiny):
    """Across settings (a second length, cp 2, tp 2 with the sliding layers' own heads and kv
    heads divided too, each recompute switch and all) and at its ends: within 2% of what the
    census measured, at a cp rank less the pairs of keys beyond the rank's own (cp_keys_gap: 272
    bytes a token at cp 2, which put the price 2.06% over once the relative states were priced,
    attn_head_half, and the router's sigmoid, which only picks the top-k and which no output
    reaches, freed rather than booked: 40 bytes a token of ffMM the records leave out)."""
    from speccat.catalogue.records.ends import load_ends
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.points import measured_per_token, price_ends, price_points
    from speccat.catalogue.records.settings import load_settings

    config, _ = tiny
    spec = run_census(config, name="tiny-inkling", seq_length=SEQ, across=True).to_dict()
    records, grid = load_records(), load_settings()
    measured = measured_per_token(spec)
    rows = [row for row in price_points(spec, records, grid) + price_ends(spec, records, grid, load_ends(records)) if (row["kind"], row["point"]) in measured]
    assert {"census", "cp 2", "tp 2", "recompute all"} <= {row["point"] for row in rows}
    assert {row["kind"] for row in rows} >= {"sliding_moe", "full_moe", "end:embedding", "end:final_norm"}
    for row in rows:
        cp = next(p["cp"] for p in spec["measured_at"] if p["point"] == row["point"]) if row["point"] != "census" else 1
        gap = cp_keys_gap(cp) if cp > 1 and not row["kind"].startswith("end:") else 0
        assert row["priced_per_token"] - gap == pytest.approx(measured[row["kind"], row["point"]], rel=2e-2), (row["kind"], row["point"])


def test_a_llama_states_none_of_them():
    """A model without these modules: no shared experts, no router cast, an embedding with no norm."""
    config = default("llama", hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2, vocab_size=256)
    spec = run_census(config, name="tiny-llama", seq_length=SEQ).to_dict()
    (kind,) = {group["kind"] for group in spec["layers"]}
    assert set(facts(spec, kind).values()) == {0}
    assert spec["ends"]["embedding_norms"] == 0 and spec["ends"]["bytes_per_token"]["embedding"] == I64
