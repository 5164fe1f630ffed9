"""DeepSeek-V4's compressed attention (docs/census.md, "Appended keys"): keys appended to the
layer's own tokens, one compressed entry per `compress_rate` tokens, which the attention kernel
keeps beside them; what the census books for a tiny layer of each kind against a real CPU
forward and backward, storage by storage; the appended keys' facts and their price, at the
census's length and at a second one.

transformers' DeepSeek-V4 attention concatenates the compressor's entries (heavily compressed:
one per 16 tokens here, compressed sparse: one per 4) to the layer's shared key-value tensor
and calls the attention interface with that one tensor as k and v; speccat's flash op keeps q
and it (once), as a flash kernel does.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from support.layer_runs import priced_vs_measured, signature, tiny_model
from support.storage_tracker import saved_tensors

from speccat.census import run_census
from speccat.census.spec import ModelSpec

BF16, FP32, I64 = 2, 4, 8
H, HEADS, D, HC, S = 64, 4, 32, 2, 64  # hidden, heads, head width, hyper-connection streams, tokens
EVERY = {"heavily_compressed_attention": 16, "compressed_sparse_attention": 4}
TOPK, INDEX_HEADS, INDEX_DIM, ROPE = 8, 2, 16, 8  # the indexer's top-k, heads and head width; the rope slice's width
Q_RANK, GROUPS, O_RANK, MOE, CHOSEN = 32, 2, 24, 32, 2  # q's latent; output groups and their rank; an expert's width, experts a token
TINY_V4 = {
    "model_type": "deepseek_v4", "vocab_size": 512, "hidden_size": H, "moe_intermediate_size": MOE, "num_hidden_layers": 4,
    "num_attention_heads": HEADS, "num_key_value_heads": 1, "head_dim": D, "qk_rope_head_dim": ROPE, "q_lora_rank": Q_RANK,
    "o_groups": GROUPS, "o_lora_rank": O_RANK, "n_routed_experts": 4, "num_experts_per_tok": CHOSEN, "index_n_heads": INDEX_HEADS,
    "index_head_dim": INDEX_DIM, "index_topk": TOPK, "sliding_window": 16, "compress_rates": EVERY, "hc_mult": HC, "hc_sinkhorn_iters": 3,
    "layer_types": ["heavily_compressed_attention", "compressed_sparse_attention"] * 2, "mlp_layer_types": ["hash_moe", "moe", "moe", "moe"],
}  # fmt: skip


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY_V4, name="tiny-deepseek-v4", seq_length=S, across=True)


def _kind(spec, index: int) -> str:
    return spec["layers"][index]["kind"]


def _real_saves(index: int, change=None) -> tuple[list, list]:
    """One real bf16 forward and backward of layer `index` with its attention through speccat's
    flash op: (what backward can reach of what it saved, what it saved that no node backward runs
    keeps: freed with its graph after the forward), the model's parameters and buffers, the
    layer's input and output, the rotary tables and the token ids left out. `change`, given the
    layer, alters it first (a quirk taken out)."""
    from speccat.census.kernels.attention import ATTENTION_IMPL

    model = tiny_model(TINY_V4, torch.bfloat16)
    model.config._attn_implementation = ATTENTION_IMPL
    model.set_experts_implementation("grouped_mm")
    decoder = model.model
    with torch.no_grad():
        for p in decoder.parameters():
            p.normal_(0.0, 0.05)  # the model's init leaves some weights empty
    if change is not None:
        change(decoder.layers[index])
    ids = torch.randint(0, TINY_V4["vocab_size"], (1, S), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(S).unsqueeze(0)
    embeds = decoder.embed_tokens(ids).detach()
    rope = {kind: decoder.rotary_emb(embeds, position_ids=positions, layer_type=kind) for kind in ("main", "compress")}
    x = embeds.unsqueeze(2).expand(-1, -1, HC, -1).contiguous().requires_grad_(True)

    with saved_tensors() as held:
        out = decoder.layers[index](x, position_embeddings=rope, position_ids=positions, attention_mask=None, input_ids=ids)
    left_out = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers(), x, ids, out, *(t for pair in rope.values() for t in pair))}
    kept = {key: pair for key, pair in held.items() if key not in left_out}
    reached = [t for t, refs in kept.values() if any(r() is not None for r in refs)]
    dropped = [t for t, refs in kept.values() if all(r() is None for r in refs)]
    out.float().square().sum().backward()  # backward runs on what it reaches
    assert x.grad is not None and torch.isfinite(x.grad).all()
    return reached, dropped


@pytest.mark.parametrize("index", [0, 1])
def test_the_census_books_what_a_real_layer_keeps_storage_by_storage(spec, index):
    reached, dropped = _real_saves(index)
    booked = spec["measured"][_kind(spec, index)]["bytes_per_token"]
    layer_input = S * HC * H * BF16  # read by the hyper-connection's products; the harness leaves it out, the census books it
    assert sum(booked.values()) * S == sum(t.untyped_storage().nbytes() for t in reached) + layer_input
    # What no backward node reaches: the compressed sparse layer's lightning indexer, whose only
    # result is the top-k indices it picks among the compressed keys, which carry no gradient. Its
    # whole graph is freed after the forward (its q_b_proj's input, q_a_norm's output, is the
    # attention's too), and the census books none of it. The heavily compressed layer has none.
    keys, window = S // EVERY["compressed_sparse_attention"], 2 * EVERY["compressed_sparse_attention"]  # compressed keys; slots each is pooled over
    unreachable = [] if index == 0 else [
        # its compressor: the pooled kv and gate laid out over two windows (bf16), the gate's fp32
        # softmax and its bf16 cast; kv_norm's fp32 input, normalised input and rstd per key
        ((1, keys, window, INDEX_DIM), torch.bfloat16, BF16 * keys * window * INDEX_DIM),
        ((1, keys, window, INDEX_DIM), torch.bfloat16, BF16 * keys * window * INDEX_DIM),
        ((1, keys, window, INDEX_DIM), torch.float32, FP32 * keys * window * INDEX_DIM),
        ((1, keys, INDEX_DIM), torch.float32, FP32 * keys * INDEX_DIM),
        ((1, keys, INDEX_DIM), torch.float32, FP32 * keys * INDEX_DIM),
        ((1, keys, 1), torch.float32, FP32 * keys),
        # the rotation's cos and sin widened to the rope width, at the keys' and at the queries' positions
        ((1, 1, keys, ROPE), torch.bfloat16, BF16 * keys * ROPE),
        ((1, 1, keys, ROPE), torch.bfloat16, BF16 * keys * ROPE),
        ((1, 1, S, ROPE), torch.bfloat16, BF16 * S * ROPE),
        ((1, 1, S, ROPE), torch.bfloat16, BF16 * S * ROPE),
        # the scorer: q and the keys in fp32 (the batched product's views), the ReLU'd scores and
        # their scaled copy, the heads' weights; the causal mask; top-k's indices
        ((S, INDEX_HEADS, INDEX_DIM), torch.float32, FP32 * S * INDEX_HEADS * INDEX_DIM),
        ((S, INDEX_DIM, keys), torch.float32, FP32 * keys * INDEX_DIM),
        ((1, S, INDEX_HEADS, keys), torch.float32, FP32 * S * INDEX_HEADS * keys),
        ((1, S, INDEX_HEADS, keys), torch.float32, FP32 * S * INDEX_HEADS * keys),
        ((1, S, INDEX_HEADS, 1), torch.float32, FP32 * S * INDEX_HEADS),
        ((1, S, keys), torch.bool, S * keys),
        ((1, S, TOPK), torch.int64, I64 * S * TOPK),
    ]  # fmt: skip
    assert signature(dropped) == signature_of(unreachable)


def signature_of(rows):
    return sorted(rows, key=str)


@pytest.mark.parametrize("index", [0, 1])
def test_the_kernel_keeps_q_and_the_shared_keys_with_the_appended_ones(spec, index):
    every = EVERY[TINY_V4["layer_types"][index]]
    kind = _kind(spec, index)
    assert spec["variants"][kind]["keys_appended_every"] == every
    assert spec["variants"][kind]["kv_same"] is True
    keys = S + S // every  # the layer's own and one compressed entry per `every` tokens
    assert spec["measured"][kind]["bytes_per_token"]["attBMM"] * S == BF16 * HEADS * D * S + BF16 * D * keys


def test_a_model_without_appended_keys_states_none():
    tiny_llama = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128}
    variants = run_census(tiny_llama, name="tiny-llama", seq_length=S)["variants"]["decoder"]
    assert (variants["keys_appended_every"], variants["kv_same"]) == (0, False)
    assert not any(variants[fact] for fact in QUIRK_FACTS)  # nor the layer's quirks


def _priced_attbmm(spec, seq: int) -> dict[str, float]:
    """kind -> the records' attBMM bytes per token at sequence length `seq`: what recomputing the
    attBMM switch (mask bit 0) drops."""
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.pricing import price_layers
    from speccat.catalogue.records.settings import load_settings

    records, grid = load_records(), load_settings()
    one = grid.with_settings([grid.setting({"seq_length": seq})])
    prices = price_layers(spec, records, one)
    bit = 1 << records.switches.index("attBMM")
    return {kind: float(prices.total[i, 0, 0] - prices.total[i, 0, bit]) / seq for i, kind in enumerate(prices.kinds)}


def test_the_records_price_the_appended_keys_as_measured_at_both_lengths(spec):
    """The kernel's saves (q, the shared keys and the appended entries) priced as the census
    measured them, at its length and at the second length, where the appended keys halve too."""
    second = next(p for p in spec["measured_at"] if p["point"].startswith("seq "))
    for seq, measured in ((S, {k: m["bytes_per_token"] for k, m in spec["measured"].items()}), (second["seq_length"], second["bytes_per_token"])):
        for kind, priced in _priced_attbmm(spec, seq).items():
            assert priced == pytest.approx(measured[kind]["attBMM"], rel=1e-9), (seq, kind)



def _view(queries: int, keys: int):
    """A layer view whose probe saw one attention kernel call over `queries` of the layer's own
    tokens and `keys` keys (a plain block: an attention child and an MLP)."""
    from torch import nn

    from speccat.census.describe.layer_view import LayerView
    from speccat.census.measure.layer_probe import LayerProbe
    from speccat.census.structure.kernel_registry import KernelCall, shapes
    from speccat.census.structure.shapes import Shape

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = nn.Linear(8, 8)
            self.mlp = nn.Linear(8, 8)

    probe = LayerProbe(0, kernels=[KernelCall("attention", "self_attn", shapes(q=(1, 2, queries, 8), k=(1, 1, keys, 8), v=(1, 1, keys, 8)))], hidden_dims=(1, queries))
    return LayerView(0, Block(), probe, Shape("full", "dense", ()), 8)


def test_appended_keys_are_one_per_a_whole_number_of_tokens_or_refused():
    from speccat.census.describe.probe_checks import check_appended_keys, check_probes
    from speccat.census.spec import SpecError

    assert _view(64, 64 + 4).keys_appended_every() == 16
    assert _view(64, 64).keys_appended_every() == 0
    check_probes([_view(64, 64 + 4)])
    with pytest.raises(SpecError, match="not one per a whole number of tokens"):
        check_probes([_view(64, 64 + 5)])
    with pytest.raises(SpecError, match="cross-attention"):
        check_probes([_view(64, 200)])  # more keys than the layer's tokens: not appended entries
    check_appended_keys(_view(64, 68), _view(32, 34), 32)
    with pytest.raises(SpecError, match="do not scale with the sequence"):
        check_appended_keys(_view(64, 68), _view(32, 36), 32)  # a fixed number of appended keys


# The layer's other quirks (docs/census.md, Known limits), what each keeps a token worked from the
# config's dims: q_b_norm, an RMS norm of each q head with no weight written as
# x * rsqrt(mean(x.float()²)).to(x.dtype), keeps q upcast to fp32 and q as given (bf16), the fp32
# rsqrt per head and its bf16 cast; q_a_norm over q's latent and kv_norm over the one shared
# key-value head, fp32-weighted RMS norms, keep each its fp32 input, normalised input and rstd,
# and q_b_proj keeps q_a_norm's bf16 output; the grouped low-rank output projection's second
# half, o_b_proj, keeps o_a_proj's output made contiguous; the routed experts clamp gate and up
# before their SiLU module, keeping six expert widths a slot (gate_up whole, the clamped gate and
# up, SiLU's output, the product) where an activation module's call on gate_up's halves keeps four.
QUIRK_FACTS = ("q_norm_weightless", "q_norm_product_half", "attn_out_lowrank_width", "attn_norm_width", "attn_norms", "attn_norm_out_width", "act_inline", "experts_act_kept")
Q_NORM = HEADS * (D + 1) * (FP32 + BF16)
LATENT_NORMS = (Q_RANK + D) * (FP32 + FP32) + 2 * FP32
LATENT_OUT = BF16 * Q_RANK
LOW_RANK = BF16 * GROUPS * O_RANK
CLAMPS = 2 * BF16 * MOE * CHOSEN


def test_the_quirks_facts_are_read_off_the_layers(spec):
    expected = {
        "q_norm_weightless": True, "q_norm_product_half": True, "attn_out_lowrank_width": GROUPS * O_RANK, "attn_norm_width": Q_RANK + D,
        "attn_norms": 2, "attn_norm_out_width": Q_RANK, "act_inline": True, "experts_act_kept": 5,
    }  # fmt: skip
    for kind, variants in spec["variants"].items():
        assert {fact: variants[fact] for fact in QUIRK_FACTS} == expected, kind


def _without_q_norm(layer):
    layer.self_attn.q_b_norm = nn.Identity()


def _without_latent_norms(layer):
    layer.self_attn.q_a_norm, layer.self_attn.kv_norm = nn.Identity(), nn.Identity()  # q_b_proj then keeps q_a_proj's bf16 output


def _without_clamps(layer):
    experts = layer.mlp.experts

    def plain_gate(gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        return experts.act_fn(gate) * up

    experts._apply_gate = plain_gate


def _bytes(tensors) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors)


@pytest.mark.parametrize("index", [0, 1])
def test_what_the_quirks_keep_is_worked_by_hand_and_priced(spec, index):
    """Each quirk taken out of a real layer frees what it was worked to keep; the low-rank output's
    input is the one storage o_a_proj's width wide; the records price all of it, beside what they
    price without the quirks' facts."""
    reached = _real_saves(index)[0]
    for change, worked in ((_without_q_norm, Q_NORM), (_without_latent_norms, LATENT_NORMS), (_without_clamps, CLAMPS)):
        assert _bytes(reached) - _bytes(_real_saves(index, change)[0]) == worked * S, change.__name__
    assert [t.untyped_storage().nbytes() for t in reached if t.shape[-1] == GROUPS * O_RANK] == [LOW_RANK * S]
    kind = _kind(spec, index)
    data = json.loads(spec.to_json())
    data["variants"][kind].update(dict.fromkeys(QUIRK_FACTS, 0))
    plain = ModelSpec(data)
    priced = priced_vs_measured(spec, S)[kind][0] - priced_vs_measured(plain, S)[kind][0]
    assert priced == pytest.approx(Q_NORM + LATENT_NORMS + LATENT_OUT + LOW_RANK + CLAMPS, rel=1e-12)


def test_a_tensor_parallel_rank_divides_an_aliased_field_once():
    """deepseek_v4's config maps intermediate_size onto moe_intermediate_size (its attribute_map):
    census/across.yaml names both, and a rank of t divides the one field once, not once per name
    (which left the tp ranks' experts a t² share of their width)."""
    from transformers import AutoConfig

    from speccat.census.across import _rank_configs

    config = AutoConfig.for_model(**TINY_V4)
    _, rank = _rank_configs(config, config, 2)
    assert (rank.moe_intermediate_size, rank.intermediate_size, rank.num_attention_heads) == (MOE // 2, MOE // 2, HEADS // 2)
