"""A hybrid layer that runs a shared transformer block before its Mamba2 layer (zamba2's), as the
probe runs it and the census describes it (docs/census.md, "Hybrid layers").

The probe runs the kept layers at their positions in a cut stack, and such a layer looks itself
up by its index: a dict its modules hold keyed by the layer indices a config list names (each
hybrid layer's adapter slot, keyed by `hybrid_layer_ids`) is re-keyed by those positions while
they run (census/measure/layer_subset.py `index_keyed_subset`), each position keeping its layer's own entry,
and restored after. The probe then books every storage the real layer keeps on CPU. The census
takes the block's children for the layer's (census/structure/predicates.py `attention_blocks`): its
attention is the attention, its MLP the feed-forward, and the linear after the block, which no
record prices, `other`; its kind is `full_mamba2_dense_block`, and the block's weights, held by
every hybrid layer, count once in the model."""

from __future__ import annotations

import pytest
from torch import nn

from speccat.census.measure.layer_subset import index_keyed_dicts
from speccat.census.measure.probe import probe_layers

BF16, FP32 = 2, 4

# a Mamba2 stack with two hybrid layers (indices 1 and 3) sharing one transformer block, each
# with adapters of its own
ZAMBA2 = {
    "model_type": "zamba2", "hidden_size": 64, "num_hidden_layers": 4, "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"],
    "num_attention_heads": 4, "num_key_value_heads": 4, "n_mamba_heads": 2, "mamba_d_state": 16, "mamba_ngroups": 1,
    "intermediate_size": 128, "vocab_size": 256, "use_shared_attention_adapter": True, "adapter_rank": 8, "num_mem_blocks": 1,
}  # fmt: skip


def _built(config):
    from speccat.census.build.model import build
    from speccat.census.intake.resolve import resolve_config

    top, text, _ = resolve_config(config)
    return build(top, text)


class _Config:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class _Keyed(nn.Module):
    def __init__(self, table):
        super().__init__()
        self.table = table


def test_only_dicts_keyed_by_a_config_list_of_layer_indices_are_found():
    # nested lists (gpt_neo's attention_types: [[["global", "local"], 12]]) are no list of indices
    config = _Config(hybrid=[1, 3], sizes=[64, 128], names=["a", "b"], flags=[0, 1, 1, 0], nested=[[["global", "local"], 2]])
    keyed, by_size, by_name = _Keyed({1: 0, 3: 1}), _Keyed({64: 0, 128: 1}), _Keyed({"a": 0, "b": 1})
    partial = _Keyed({1: 0})  # keyed by some of the listed indices only: not the list's table
    by_flag = _Keyed({0: "nope", 1: "rope"})  # keyed by a per-layer list's values, which repeat: no layer indices
    private = _Keyed({})
    private._hooks_by_id = {1: None, 3: None}  # torch's own dicts are private attributes, keyed by handle ids
    found = index_keyed_dicts(config, [nn.ModuleList([keyed, by_size, by_name, partial, by_flag, private])], total=4)
    assert [(module, key) for module, key, _ in found] == [(keyed, "table")]


@pytest.mark.parametrize("index, slot", [(3, 1), (1, 0)])
def test_a_hybrid_layer_runs_at_its_position_with_its_own_adapters(index, slot):
    built = _built(ZAMBA2)
    block = built.layers[index].shared_transformer
    tables = {id(m): dict(m.layer_dic) for m in block.modules() if hasattr(m, "layer_dic")}
    ran = []
    adapters = block.feed_forward.gate_up_proj_adapter_list
    hooks = [adapter.register_forward_hook(lambda m, a, o, i=i: ran.append(i)) for i, adapter in enumerate(adapters)]
    try:
        probe = probe_layers(built, [index], 16)[index]
    finally:
        for hook in hooks:
            hook.remove()
    assert ran == [slot]  # the layer's own adapter slot, though it ran at position 0
    assert sum(probe.saved_bytes.values()) > 0
    assert {id(m): m.layer_dic for m in block.modules() if hasattr(m, "layer_dic")} == tables  # restored


def _real_hybrid_layer(config: dict, index: int, seq: int, monkeypatch):
    """One real bf16 forward and backward of hybrid layer `index` on CPU, through the census's
    kernels (speccat attention, the fused SSD op): the storages it saved."""
    import torch
    from support.layer_runs import saves_and_grads, tiny_model
    from transformers.models.zamba2 import modeling_zamba2

    from speccat.census.kernels.attention import ATTENTION_IMPL, register
    from speccat.census.kernels.ssd import speccat_mamba_split_conv1d_scan_combined

    register()
    monkeypatch.setattr(modeling_zamba2, "mamba2_split_conv1d_scan_combined", speccat_mamba_split_conv1d_scan_combined)
    model = tiny_model({**config, "attn_implementation": ATTENTION_IMPL}, torch.bfloat16)
    torch.manual_seed(1)
    x = torch.randn(1, seq, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    embeddings = torch.randn(1, seq, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    kept, _ = saves_and_grads(model, model.model.layers[index], x, original_hidden_states=embeddings, layer_idx=index)
    monkeypatch.undo()
    return kept


def test_the_probe_books_what_the_real_hybrid_layer_keeps_storage_by_storage(monkeypatch):
    """The probe of a hybrid layer run at position 0 of the cut stack books every byte that layer
    keeps on real tensors (bf16, CPU), where its own adapters run: the shared block's norm over the
    concatenation (two widths), its attention with rank-wide adapters, its MLP with one, the
    linear back to the hidden width, and the Mamba2 decoder layer after it."""
    import torch
    from support.layer_runs import signature

    H, HEADS, FF, R, MH, N, S = 64, 4, 128, 8, 2, 16, 32  # hidden, heads, MLP width, adapter rank, ssm heads, state, tokens
    W2, DH, DI = 2 * H, 2 * H // HEADS, 2 * H  # the block's width (hidden states beside the embeddings); ssm inner width
    built = _built(ZAMBA2)
    probe = probe_layers(built, [3], S)[3]
    kept = _real_hybrid_layer(ZAMBA2, 3, S, monkeypatch)
    f32, bf16 = torch.float32, torch.bfloat16
    expected = [
        # the block's RMSNorm over the concatenation: fp32 upcast input, fp32 rstd, bf16 output
        ((1, S, W2), f32), ((1, S, 1), f32), ((1, S, W2), bf16),
        # q/k/v projections' input (the norm's output, 2-D); each adapter's rank-wide middle
        ((S, W2), bf16), ((S, R), bf16), ((S, R), bf16), ((S, R), bf16),
        # the attention kernel: q, k, v; its output (o_proj's input, a view) and fp32 log-sum-exp
        ((1, HEADS, S, DH), bf16), ((1, HEADS, S, DH), bf16), ((1, HEADS, S, DH), bf16), ((1, S, HEADS, DH), bf16), ((1, HEADS, S), f32),
        # the MLP's RMSNorm (hidden wide), gate_up's input, its adapter's middle; the activation's
        # input (a view of gate_up's whole output), its output, and the product (down's input)
        ((1, S, H), f32), ((1, S, 1), f32), ((1, S, H), bf16), ((S, H), bf16), ((S, R), bf16),
        ((1, S, FF), bf16), ((1, S, FF), bf16), ((S, FF), bf16),
        # the linear back to the hidden width: its input
        ((S, H), bf16),
        # the Mamba2 decoder layer: its RMSNorm, in_proj's input, exp(A_log); the fused kernel's
        # zxbcdt, the scan's output, A, the gated norm's rstd per group
        ((1, S, H), f32), ((1, S, 1), f32), ((1, S, H), bf16), ((S, H), bf16), ((MH,), f32),
        ((1, S, 2 * DI + 2 * N + MH), bf16), ((1, S, MH, DI // MH), bf16), ((MH,), f32), ((1, S), f32),
    ]  # fmt: skip
    real = signature(kept.values())
    assert sorted(((shape, dtype) for shape, dtype, _ in real), key=str) == sorted(expected, key=str)
    assert sum(probe.saved_bytes.values()) == sum(n for _, _, n in real)
    # the three RMSNorms' saves, the block's over two widths, are booked to the norms
    assert probe.saved_bytes["normOp"] == S * ((FP32 + BF16) * W2 + FP32 + 2 * ((FP32 + BF16) * H + FP32))


def _real_layer(config: dict, index: int, seq: int, monkeypatch, **inputs):
    """One real bf16 forward and backward of layer `index` on CPU through the census's kernels:
    the storages it saved (its inputs and the weights left out)."""
    from support.layer_runs import layer_saves
    from transformers.models.zamba2 import modeling_zamba2

    from speccat.census.kernels.ssd import speccat_mamba_split_conv1d_scan_combined

    kernels = {"mamba2_split_conv1d_scan_combined": speccat_mamba_split_conv1d_scan_combined}
    return layer_saves(monkeypatch, modeling_zamba2, kernels, config, index, seq, **inputs)


def test_the_census_books_each_zamba2_layer_as_the_real_one_keeps_it(monkeypatch):
    """The census of a tiny zamba2 (two Mamba2 layers, two hybrid layers sharing one block with
    adapters of their own): the kinds and counts its `layers_block_type` gives, and for each kind
    the bytes booked per op, by hand from the widths, adding up to what the real layer keeps on
    CPU storage by storage."""
    import torch
    from support.layer_runs import signature

    from speccat.census import run_census

    H, HEADS, FF, R, MH, N, S = 64, 4, 128, 8, 2, 16, 32
    W2, DH, DI = 2 * H, 2 * H // HEADS, 2 * H
    spec = run_census(ZAMBA2, name="zamba2", seq_length=S)
    kind = {"mamba": "mamba2", "hybrid": "full_mamba2_dense_block"}
    assert spec["layers"] == [{"kind": kind[t], "count": 1} for t in ZAMBA2["layers_block_type"]]
    assert spec["flavours"]["full_mamba2_dense_block"] == {"attention": "full_mamba2", "ffn": "dense"}
    assert spec["intermediate_size"] == FF and (spec["num_attention_heads"], spec["head_dim"]) == (HEADS, DH)
    norm = lambda width: (FP32 + BF16) * width + FP32  # noqa: E731  an RMSNorm: fp32 input, bf16 output, fp32 rstd
    mamba2 = {"attMM": BF16 * H + FP32 * MH / S, "normOp": norm(H), "linrec": BF16 * (2 * DI + 2 * N + MH) + BF16 * DI + FP32 + FP32 * MH / S}
    hybrid = {
        # the norm's output the q, k, v projections read (two widths), the three adapters' middles; in_proj's input, exp(A_log)
        "attMM": BF16 * W2 + 3 * BF16 * R + mamba2["attMM"],
        "attBMM": 3 * BF16 * W2,  # q, k, v
        "softmax": BF16 * W2 + FP32 * HEADS,  # the kernel's output, its log-sum-exp
        # gate_up's input, its adapter's middle, the activation's output and down's input
        "ffMM": BF16 * H + BF16 * R + 2 * BF16 * FF,
        "ffAct": BF16 * 2 * FF,  # the activation's input: a view of gate_up's whole output
        "normOp": norm(W2) + norm(H) + mamba2["normOp"],
        "linrec": mamba2["linrec"],
        "other": BF16 * H,  # the linear's input: the block's output
    }
    embeddings = torch.randn(1, S, H, dtype=torch.bfloat16, requires_grad=True)
    for name, index, expected, inputs in [
        ("mamba2", 0, mamba2, {}),
        ("full_mamba2_dense_block", 3, hybrid, {"original_hidden_states": embeddings, "layer_idx": 3}),
    ]:
        measured = {op: n for op, n in spec["measured"][name]["bytes_per_token"].items() if n}
        assert measured == pytest.approx(expected, abs=1e-9), name
        real = signature(_real_layer(ZAMBA2, index, S, monkeypatch, **inputs).values())
        assert sum(measured.values()) * S == sum(n for _, _, n in real), name


def test_the_shared_block_counts_once_in_the_model():
    """Every hybrid layer holds the shared block (and every layer's adapters in it): each counts
    its share, so the model's parameters are the built model's (each part rounded down)."""
    from speccat.census import run_census

    built = _built(ZAMBA2)
    spec = run_census(ZAMBA2, name="zamba2", seq_length=32)
    params = spec["params"]
    counted = sum(params[p] for p in ("embedding", "output", "final_norm"))
    counted += sum(group["count"] * sum(params["kinds"][group["kind"]].values()) for group in spec["layers"])
    real = sum(p.numel() for p in built.model.parameters())
    hybrid_layers = ZAMBA2["layers_block_type"].count("hybrid")
    assert real - len(params["kinds"]["mamba2"]) * hybrid_layers < counted <= real
    block = sum(p.numel() for p in built.layers[1].shared_transformer.parameters())
    own = sum(p.numel() for n, p in built.layers[1].named_parameters() if not n.startswith("shared_transformer."))
    assert sum(params["kinds"]["full_mamba2_dense_block"].values()) == own + block // hybrid_layers
