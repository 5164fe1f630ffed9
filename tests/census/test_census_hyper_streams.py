"""Hyper-connection streams (hy_v4's, deepseek_v4's): the decoder hands each layer `hc_mult`
copies of the stream, hidden states of dims (batch, tokens, streams, width). The census's
tokens are those up to the sequence's dim (census/measure/watcher.py `tokens_of`), not the
streams: facts stated per token (an output gate's elements per head and token) read at the
tokens, not at tokens × streams (hy_v4's gate of v_head_dim per head was read as a quarter of it).
"""

from __future__ import annotations

import torch

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
