"""Short convolutions (LFM2's ShortConv; docs/census.md, "State-space mixers"): what the census books
for one conv layer against a real CPU forward and backward of the same layer, storage by storage;
its kinds and counts; priced against measured.

The census runs the conv through `speccat::causal_conv1d`, which keeps what the causal-conv1d
kernel keeps: its input (and the weights), never the conv's output before or after an
activation (the kernel recomputes them). transformers' reference path (its `causal_conv1d_fn`
without the package: F.conv1d, then a slice) keeps the same thing, the conv's input, so the real
reference run and the census agree storage by storage but for one padded output, explained in the test.
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import priced_vs_measured, saves_and_grads, signature, tiny_model

from speccat.census import run_census

BF16, FP32 = 2, 4
H, W, HEADS, KV, S = 64, 128, 4, 2, 32  # hidden, MLP width, heads, kv heads, tokens
TINY_LFM2 = {
    "model_type": "lfm2", "hidden_size": H, "intermediate_size": W, "num_hidden_layers": 4, "num_attention_heads": HEADS,
    "num_key_value_heads": KV, "vocab_size": 128, "layer_types": ["conv", "full_attention", "conv", "conv"],
    "block_auto_adjust_ff_dim": False, "conv_L_cache": 3, "torch_dtype": "bfloat16",
}  # fmt: skip


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY_LFM2, name="tiny-lfm2", seq_length=S)


def _conv_layer_saves(fused: bool, monkeypatch) -> list[tuple[tuple[int, ...], torch.dtype, int]]:
    """A real bf16 forward and backward of conv layer 0, through the census's conv op or transformers' reference."""
    from transformers.models.lfm2 import modeling_lfm2

    from speccat.census.kernels.causal_conv1d import speccat_causal_conv1d_fn

    if fused:
        monkeypatch.setattr(modeling_lfm2, "causal_conv1d_fn", speccat_causal_conv1d_fn)
    model = tiny_model(TINY_LFM2, torch.bfloat16)
    x = torch.randn(1, S, H, dtype=torch.bfloat16, requires_grad=True)
    kept, _ = saves_and_grads(model, model.model.layers[0], x)
    monkeypatch.undo()
    return signature(kept.values())


def test_a_conv_layer_books_what_the_kernel_keeps_storage_by_storage(spec, monkeypatch):
    kernel = _conv_layer_saves(True, monkeypatch)
    reference = _conv_layer_saves(False, monkeypatch)
    # The reference conv keeps its input only, as the kernel does; one storage differs in size:
    # the conv output that C multiplies is, in the reference, a slice of F.conv1d's padded output
    # (s + width - 1 positions), while the kernel writes exactly s.
    width = TINY_LFM2["conv_L_cache"]
    padded = [(shape, dtype, BF16 * H * (S + width - 1)) for shape, dtype, n in kernel if (shape, n) == ((1, H, S), BF16 * H * S)]
    assert padded and len(padded) <= 2
    differ = [r for r in reference if r not in kernel]
    assert differ == [padded[0]], differ
    assert len(reference) == len(kernel)
    assert sum(n for *_, n in reference) - sum(n for *_, n in kernel) == BF16 * H * (width - 1)
    f32, bf16 = torch.float32, torch.bfloat16
    norm = [((1, S, H), f32), ((1, S, 1), f32), ((1, S, H), bf16)]  # an RMSNorm's fp32 input, rstd, bf16 normalised input
    expected = [
        *norm,
        # in_proj's input (the norm's output, 2-D); its output B, C, x (the products keep views
        # of it: (1, h, s) seen, 3h stored); the conv's input B·x; the conv's output that C
        # multiplies; out_proj's input
        ((S, H), bf16), ((1, H, S), bf16), ((1, H, S), bf16), ((1, H, S), bf16), ((S, H), bf16),
        *norm,
        # the MLP: w1/w3's input, w1's output (SiLU's input), SiLU's output and w3's output (the
        # product keeps both), w2's input (the product)
        ((S, H), bf16), ((1, S, W), bf16), ((1, S, W), bf16), ((1, S, W), bf16), ((S, W), bf16),
    ]  # fmt: skip
    assert sorted(((s, d) for s, d, _ in kernel), key=str) == sorted(expected, key=str)
    assert sorted(n for s, _, n in kernel if s == (1, H, S)) == [BF16 * H * S, BF16 * H * S, BF16 * 3 * H * S]
    assert spec["measured"]["short_conv_dense"]["attention_impl"] == "speccat::causal_conv1d"
    booked = spec["measured"]["short_conv_dense"]["bytes_per_token"]
    assert sum(booked.values()) * S == sum(n for _, _, n in kernel)
    assert booked["attMM"] == BF16 * (H + 3 * H + H + H + H)
    assert booked["ffAct"] == BF16 * W  # the inline F.silu's input


def test_lfm2_gives_its_kinds_and_counts(spec):
    """layer_types conv, full_attention, conv, conv: a short-conv kind and an attention kind, each with a dense MLP."""
    assert spec["layers"] == [{"kind": "short_conv_dense", "count": 1}, {"kind": "full_dense", "count": 1}, {"kind": "short_conv_dense", "count": 2}]
    assert spec["flavours"]["short_conv_dense"] == {"attention": "short_conv", "ffn": "dense"}
    assert spec["short_conv_kernel"] == 3
    ops = spec["ops"]["short_conv_dense"]
    # in and out projections around the conv; gate, up, down; one inline SiLU; two norms; no attention
    assert {op: ops[op] for op in ("attMM", "attBMM", "softmax", "ffMM", "ffAct", "normOp", "linrec")} == {
        "attMM": 2, "attBMM": 0, "softmax": 0, "ffMM": 3, "ffAct": 1, "normOp": 2, "linrec": 0,
    }  # fmt: skip


@pytest.mark.parametrize("seq", [S, 4096])
def test_short_conv_stacks_are_priced_as_measured(seq):
    spec = run_census(TINY_LFM2, name="tiny-lfm2", seq_length=seq)
    for kind, (priced, measured) in priced_vs_measured(spec, seq).items():
        assert abs(priced / measured - 1) <= 0.02, (kind, priced, measured)
