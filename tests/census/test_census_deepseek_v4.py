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

import pytest
import torch
from support.layer_runs import signature, tiny_model
from support.storage_tracker import saved_tensors

from speccat.census import run_census

BF16, FP32, I64 = 2, 4, 8
H, HEADS, D, HC, S = 64, 4, 32, 2, 64  # hidden, heads, head width, hyper-connection streams, tokens
EVERY = {"heavily_compressed_attention": 16, "compressed_sparse_attention": 4}
TOPK, INDEX_HEADS = 8, 2
TINY_V4 = {
    "model_type": "deepseek_v4", "vocab_size": 512, "hidden_size": H, "moe_intermediate_size": 32, "num_hidden_layers": 4,
    "num_attention_heads": HEADS, "num_key_value_heads": 1, "head_dim": D, "qk_rope_head_dim": 8, "q_lora_rank": 32,
    "o_groups": 2, "o_lora_rank": 16, "n_routed_experts": 4, "num_experts_per_tok": 2, "index_n_heads": INDEX_HEADS,
    "index_head_dim": 16, "index_topk": TOPK, "sliding_window": 16, "compress_rates": EVERY, "hc_mult": HC, "hc_sinkhorn_iters": 3,
    "layer_types": ["heavily_compressed_attention", "compressed_sparse_attention"] * 2, "mlp_layer_types": ["hash_moe", "moe", "moe", "moe"],
}  # fmt: skip


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY_V4, name="tiny-deepseek-v4", seq_length=S, across=True)


def _kind(spec, index: int) -> str:
    return spec["layers"][index]["kind"]


def _real_saves(index: int) -> tuple[list, list]:
    """One real bf16 forward and backward of layer `index` with its attention through speccat's
    flash op: (what backward can reach of what it saved, what it saved that no node backward runs
    keeps: freed with its graph after the forward), the model's parameters and buffers, the
    layer's input and output, the rotary tables and the token ids left out."""
    from speccat.census.kernels.attention import ATTENTION_IMPL

    model = tiny_model(TINY_V4, torch.bfloat16)
    model.config._attn_implementation = ATTENTION_IMPL
    model.set_experts_implementation("grouped_mm")
    decoder = model.model
    with torch.no_grad():
        for p in decoder.parameters():
            p.normal_(0.0, 0.05)  # the model's init leaves some weights empty
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
    # What no backward node reaches: the compressed sparse layer's lightning indexer scores the
    # compressed keys and keeps their top-k indices, which carry no gradient; its scoring graph
    # (ReLU'd scores and head weights, fp32; the causal mask; top-k's indices) is freed after the
    # forward, and the census does not book it. The heavily compressed layer has none.
    unreachable = [] if index == 0 else [
        ((1, S, INDEX_HEADS, S // EVERY["compressed_sparse_attention"]), torch.float32, FP32 * S * INDEX_HEADS * S // 4),
        ((1, S, INDEX_HEADS, 1), torch.float32, FP32 * S * INDEX_HEADS),
        ((1, S, S // EVERY["compressed_sparse_attention"]), torch.bool, S * S // 4),
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
