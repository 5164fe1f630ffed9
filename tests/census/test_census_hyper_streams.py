"""Hyper-connection streams (hy_v4's, deepseek_v4's): the decoder hands each layer `hc_mult`
copies of the stream, hidden states of dims (batch, tokens, streams, width). The census's
tokens are those up to the sequence's dim (census/measure/watcher.py `tokens_of`), not the
streams: facts stated per token (an output gate's elements per head and token) read at the
tokens, not at tokens × streams (hy_v4's gate of v_head_dim per head was read as a quarter of it).
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import priced_vs_measured
from support.storage_tracker import saved_tensors

from speccat.census import run_census
from speccat.census.measure.watcher import tokens_of

B = 2  # bf16 bytes
H, S, NH, QR, KR, NOPE, ROPE, V, HC = 64, 32, 4, 32, 16, 16, 8, 24, 4  # hidden, tokens, heads, q and kv lora ranks, head dims, streams
TINY = {
    "model_type": "hy_v4", "hidden_size": H, "num_hidden_layers": 2, "num_attention_heads": NH, "num_key_value_heads": NH,
    "q_lora_rank": QR, "kv_lora_rank": KR, "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE, "head_dim": ROPE, "v_head_dim": V,
    "intermediate_size": 48, "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
    "mlp_layer_types": ["dense", "sparse"], "layer_types": ["indexed_attention"] * 2, "indexer_types": ["full", "shared"],
    "index_topk": 8, "index_head_dim": 16, "index_n_heads": 2, "hc_mult": HC, "vocab_size": 128, "max_position_embeddings": 64,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
}  # fmt: skip


def test_the_tokens_are_the_dims_up_to_the_sequences():
    assert tokens_of((1, 256), 256) == 256
    assert tokens_of((256, 1), 256) == 256  # sequence-major, the census's one sequence
    assert tokens_of((1, 256, 4), 256) == 256  # four streams of each token
    assert tokens_of((1, 4, 4), 4) == 4  # as many streams as tokens: the first such dim is the sequence's
    assert tokens_of((2, 3), 256) == 6  # no dim of the sequence's size: every dim


def test_an_output_gate_beside_hyper_connection_streams_is_read_per_token():
    """hy_v4's attention multiplies its output by sigmoid(gate_proj(x)), v_head_dim per head: the
    gate's width and the elements its sigmoid keeps (its output, which the product reads) are V
    per head and token, whatever the streams; a real CPU forward and backward of the attention
    keeps that sigmoid's output, NH × V bf16 elements a token."""
    spec = run_census(TINY, name="hy_v4_tiny", seq_length=S)
    for kind, facts in spec["variants"].items():
        assert (facts["attn_gate_width"], facts["attn_gate_kept"], facts["attn_gate_kept_fp32"]) == (V, V, 0), kind
        assert facts["ff_stats_kept"] == 0, kind  # the hyper-connections' per-stream mixes, (b, s, streams, 1) beside the MLP, are no statistic of its
    # by hand, per token, what attMM keeps: the projections' input (the norm's output, H), the
    # up-projections' inputs (the latent norms' outputs, QR and KR), the sigmoid's output and the
    # product o_proj reads (NH × V each), all bf16; and, booked after the attention's child, the
    # layer's own fp32 copy of the attention's output (H) and the streams' fp32 post weights (HC)
    # that its product with them keeps
    for kind, measured in spec["measured"].items():
        assert measured["bytes_per_token"]["attMM"] == B * (H + QR + KR + 2 * NH * V) + 4 * (H + HC), kind

    from support.layer_runs import tiny_model

    model = tiny_model({**TINY, "attn_implementation": "eager"}, torch.bfloat16)
    attention = model.model.layers[0].self_attn
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=torch.bfloat16, requires_grad=True)
    rotary = model.model.rotary_emb(x, torch.arange(S).unsqueeze(0))
    mask = torch.full((S, S), torch.finfo(torch.bfloat16).min, dtype=torch.bfloat16).triu(1)[None, None]
    saved: dict[int, torch.Tensor] = {}

    def pack(t):
        saved.setdefault(t.untyped_storage()._cdata, t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = attention(x, rotary, mask)[0]
    out.float().square().sum().backward()
    gate = torch.sigmoid(attention.gate_proj(x.detach())).view(1, S, NH, V)
    kept = [t for t in saved.values() if t.shape == gate.shape and t.dtype == torch.bfloat16 and torch.equal(t, gate)]
    assert len(kept) == 1 and kept[0].numel() // S == NH * V == NH * spec["variants"]["full_dense"]["attn_gate_kept"]


F32 = 4
FF, EXPERT, TOP_K = TINY["intermediate_size"], TINY["moe_intermediate_size"], TINY["num_experts_per_tok"]


def _kind(spec, index: int) -> str:
    return spec["layers"][index]["kind"]


def _real_layer_bytes(index: int) -> int:
    """One real bf16 forward and backward of the tiny hy_v4's layers up to `index` on CPU (a
    shared-indexer layer is handed the top-k of the layer before it), its attention through
    speccat's flash op and its experts through grouped_mm as the census runs them: the bytes of
    what layer `index` saved that backward reaches, its parameters, input, output, the rotary
    tables, the mask and the top-k it was handed left out."""
    from support.layer_runs import tiny_model

    from speccat.census.kernels.attention import ATTENTION_IMPL, register

    register()
    model = tiny_model({**TINY, "attn_implementation": ATTENTION_IMPL}, torch.bfloat16)
    model.set_experts_implementation("grouped_mm")
    decoder = model.model
    with torch.no_grad():
        for p in decoder.parameters():
            p.normal_(0.0, 0.05)  # the model's init leaves the hyper-connections' weights empty
    torch.manual_seed(1)
    x = torch.randn(1, S, HC, H, dtype=torch.bfloat16, requires_grad=True)
    positions = torch.arange(S).unsqueeze(0)
    rotary = decoder.rotary_emb(x, positions)
    mask = torch.full((S, S), torch.finfo(torch.bfloat16).min, dtype=torch.bfloat16).triu(1)[None, None]
    given = dict(attention_mask=mask, position_ids=positions, position_embeddings=rotary)
    topk = None
    for layer in decoder.layers[:index]:
        topk = layer(x, **given, prev_topk_indices=topk)[1]

    with saved_tensors() as held:
        out = decoder.layers[index](x, **given, prev_topk_indices=topk)[0]
    left_out = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers(), x, out, mask, *rotary)}
    if topk is not None:
        left_out.add(topk.untyped_storage()._cdata)
    # what backward reaches: the group-limited router's masks, saved by nodes no output reaches,
    # are freed with them after the forward (as the census books)
    reached = [t for key, (t, refs) in held.items() if key not in left_out and any(r() is not None for r in refs)]
    out.float().square().sum().backward()
    assert torch.isfinite(x.grad).all()
    return sum(t.untyped_storage().nbytes() for t in reached)


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY, name="hy_v4_tiny", seq_length=S)


def test_the_hyper_connections_facts_are_read_off_what_ran(spec):
    """Each layer's two stream mixers (attn_hc, ffn_hc) keep, per token: the HC streams flattened
    and cast to fp32 (their mixing linear's and unweighted norm's input) and the streams as given
    (the collapse with the pre weights keeps them), one tensor of every stream's width each; the
    mixing linear's output and the mixes (2·HC each), the pre and post sigmoids' outputs, pre
    (the collapse's factor) and post (the expansion's, kept after the block), HC each: 8 fp32
    elements a stream; the norm's rsqrt (its input, the flattened streams, is the linear's
    first); and the layer's expansion of each block's output keeps its fp32 copy, 4 bytes a
    hidden channel after the attention and after the MLP."""
    for kind, facts in spec["variants"].items():
        got = {name: facts[name] for name in ("hc_streams", "hc_mixers", "hc_wide_fp32", "hc_wide_half", "hc_narrow_fp32", "hc_norm_rows")}
        assert got == {"hc_streams": HC, "hc_mixers": 2, "hc_wide_fp32": 1, "hc_wide_half": 1, "hc_narrow_fp32": 8, "hc_norm_rows": 1}, kind
        assert (facts["hc_norm_wide_fp32"], facts["hc_out_attn_bytes"], facts["hc_out_ff_bytes"]) == (0, F32, F32), kind
        # post, one fp32 element a stream, (b, s, HC, 1) with HC = NH here, made by the mixer and
        # kept by the attention's block: no row per head of the attention's own code
        assert facts["attn_head_fp32"] == 0, kind
    dense, moe = _kind(spec, 0), _kind(spec, 1)
    # the shared-indexer layer is handed layer 0's top-k: its kernel keeps no indices of its own
    assert (spec["variants"][dense]["index_borrowed"], spec["variants"][moe]["index_borrowed"]) == (False, True)
    # the experts' clamped SwiGLU keeps gate_up whole (two widths), the clamped gate and up and
    # SiLU's output: five tensors of an expert's width a slot
    assert (spec["variants"][moe]["act_inline"], spec["variants"][moe]["experts_act_kept"]) == (True, 5)


def test_a_plain_stream_states_no_hyper_connections():
    from transformers import CONFIG_MAPPING

    config = {
        **CONFIG_MAPPING["llama"]().to_dict(), "model_type": "llama", "hidden_size": H, "num_attention_heads": NH,
        "num_key_value_heads": NH, "intermediate_size": 48, "num_hidden_layers": 2, "vocab_size": 128,
    }  # fmt: skip
    facts = run_census(config, name="tiny-llama", seq_length=S)["variants"]
    for kind, stated in facts.items():
        assert not any(stated[name] for name in ("hc_streams", "hc_mixers", "hc_wide_fp32", "hc_wide_half", "hc_narrow_fp32", "hc_norm_rows")), kind
        assert (stated["hc_norm_wide_fp32"], stated["hc_out_attn_bytes"], stated["hc_out_ff_bytes"], stated["index_borrowed"]) == (0, 0, 0, False), kind


@pytest.mark.parametrize("index", [0, 1], ids=["dense, own indexer", "MoE, shared indexer"])
def test_a_real_layer_keeps_what_the_census_books_and_the_records_price(spec, index):
    kind = _kind(spec, index)
    measured = spec["measured"][kind]["bytes_per_token"]
    # the streams the layer is given are kept by attn_hc's collapse: the harness leaves the
    # layer's input out, the census books it
    assert sum(measured.values()) * S == _real_layer_bytes(index) + S * HC * H * B
    # by hand, per token, what the hyper-connections keep (facts above): two mixers, each the
    # streams in fp32 and bf16, 8 fp32 elements a stream, one fp32 rsqrt (normOp); the two
    # blocks' outputs in fp32
    mixers = 2 * (HC * H * (F32 + B) + F32 * 8 * HC)
    assert measured["other"] == mixers - 2 * F32 * HC  # post, made by a mixer, is kept after the block, booked with it
    priced, got = priced_vs_measured(spec, S)[kind]
    # all of it priced but grouped_mm's offsets, one int32 per expert a layer call, whatever the
    # tokens (as in every MoE run through grouped_mm)
    offsets = 4 * TINY["n_routed_experts"] / S if index == 1 else 0
    assert priced == pytest.approx(got - offsets, rel=1e-9)
