"""recurrent_gemma's RG-LRU (docs/census.md, "State-space mixers"): what the census books for a
recurrent block's layer against a real CPU forward and backward of the same layer; the
recurrence through `speccat::rg_lru_scan` against transformers' own loop (what training runs:
transformers has no kernel for it), storage by storage per token and in its gradients; the
kinds, counts and facts; priced against measured.
"""

from __future__ import annotations

import types

import pytest
import torch
from support.layer_runs import assert_same_grads, priced_vs_measured, saves_and_grads, signature, tiny_model

from speccat.census import run_census

BF16, FP32 = 2, 4
H, W, I, S, K = 64, 48, 160, 32, 4  # hidden, lru_width, intermediate_size (the MLP is half as wide), tokens, conv width
TINY = {
    "model_type": "recurrent_gemma", "hidden_size": H, "lru_width": W, "intermediate_size": I, "num_attention_heads": 4,
    "num_hidden_layers": 3, "vocab_size": 128, "attention_window_size": 64, "conv1d_width": K, "torch_dtype": "bfloat16",
}  # fmt: skip


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY, name="tiny-recurrent-gemma", seq_length=S)


def _run_layer(model, dtype, ours: bool, use_cache: bool = False):
    """One real forward and backward of layer 0 (a recurrent block), its recurrence through
    speccat's op (put in place of `_rnn_scan` on the instance) or transformers' loop."""
    from speccat.census.kernels.rglru import speccat_rnn_scan

    layer = model.model.layers[0]
    lru = layer.temporal_block.rg_lru
    if ours:
        lru._rnn_scan = types.MethodType(speccat_rnn_scan, lru)
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=dtype, requires_grad=True)
    try:
        return saves_and_grads(model, layer, x, position_ids=torch.arange(S)[None], attention_mask=None, use_cache=use_cache)
    finally:
        lru.__dict__.pop("_rnn_scan", None)


def _scan_slices(kept) -> list:
    """What the loop keeps per token: fp32 tensors one token wide (b, W)."""
    return [t for t in kept.values() if tuple(t.shape) == (1, W) and t.dtype == torch.float32]


def test_the_census_books_what_a_real_layer_keeps(spec):
    """The census's bytes per token for the recurrent kind equal a real bf16 forward and backward of
    the same layer with the loop as transformers writes it, in total and for the recurrence: the
    loop keeps per token its fp32 state before the token and the token's gate cast to fp32 (the
    first token's gate multiplies the zero start state: not kept), 2·S − 1 slices (b, W); the
    census books those bytes to linrec."""
    kept, _ = _run_layer(tiny_model(TINY, torch.bfloat16), torch.bfloat16, ours=False)
    booked = spec["measured"]["rglru_dense"]["bytes_per_token"]
    slices = _scan_slices(kept)
    assert len(slices) == 2 * S - 1
    assert booked["linrec"] * S == sum(t.untyped_storage().nbytes() for t in slices) == (2 * S - 1) * FP32 * W
    # every storage the layer keeps (its input is not: the norm keeps its fp32 upcast)
    assert sum(booked.values()) * S == sum(n for _, _, n in signature(kept.values()))


def test_the_census_books_the_ops_storage_by_storage(spec):
    """A real bf16 forward and backward of the layer with the recurrence through speccat's op,
    storage by storage, and the census's booking of each op by hand from it."""
    kept, _ = _run_layer(tiny_model(TINY, torch.bfloat16), torch.bfloat16, ours=True)
    f32, bf16, m = torch.float32, torch.bfloat16, I // 2  # the MLP's width
    seq = ((1, S, W), bf16, S * W * BF16)
    norm = [((1, S, H), f32, S * H * FP32), ((1, S, 1), f32, S * FP32), ((H,), f32, H * FP32), ((1, S, H), f32, S * H * FP32)]
    expected = [
        *norm, *norm,  # two RMSNorms: the fp32 input, rstd, (1 + weight) in fp32, the normalised input
        ((S, H), bf16, S * H * BF16), ((S, H), bf16, S * H * BF16),  # the block's projections' input, the MLP's
        seq, seq,  # the y branch: GELU's input (linear_y's output) and output
        ((1, W, S), bf16, S * W * BF16),  # the conv's input (linear_x's output, transposed)
        ((4, S, W // 4), bf16, (S + K - 1) * W * BF16),  # the conv's output, K − 1 rows longer (the gates read views)
        seq, seq, seq, seq, seq, seq,  # both gates' sigmoids, −8·gate, a, a², 1 − a²
        ((W,), bf16, W * BF16),  # softplus of the recurrent parameter
        seq, seq,  # the multiplier and the gated input (their product keeps both)
        ((1, S, 1), torch.bool, S), ((1, S, 1), torch.bool, S),  # ~reset: the multiplier's and the gate's
        ((1, S, W), f32, S * W * FP32), ((1, S - 1, W), f32, (S - 1) * W * FP32),  # speccat::rg_lru_scan
        seq, ((S, W), bf16, S * W * BF16),  # the recurrence's output (its product with y keeps it) and out's input
        ((1, S, m), bf16, S * m * BF16), ((1, S, m), bf16, S * m * BF16), ((1, S, m), bf16, S * m * BF16),  # the MLP: GELU's input, its output, up's output
        ((S, m), bf16, S * m * BF16),  # down's input
    ]  # fmt: skip
    assert signature(kept.values()) == sorted(expected, key=str)
    booked = {op: n * S for op, n in spec["measured"]["rglru_dense"]["bytes_per_token"].items() if n}
    assert booked == {
        "normOp": 2 * (2 * S * H * FP32 + S * FP32 + H * FP32),
        "attMM": S * BF16 * (H + 13 * W) + (K - 1) * W * BF16 + W * BF16 + 2 * S,
        "ffAct": S * BF16 * (W + m),  # the block's GELU input and the MLP's
        "linrec": (2 * S - 1) * W * FP32,
        "ffMM": S * BF16 * (H + 3 * m),
    }


@pytest.mark.parametrize("use_cache", [False, True])
def test_the_op_keeps_what_the_loop_keeps(use_cache):
    """Through speccat::rg_lru_scan the layer keeps everything outside the recurrence as with the
    loop, and inside it the same bytes as whole tensors: the fp32 states before each token (1, S,
    W) and the fp32 gates of every token but the first (1, S − 1, W). With the cache transformers
    seeds the start state with fp32 zeros of its own: the same."""
    ours, _ = _run_layer(tiny_model(TINY, torch.bfloat16), torch.bfloat16, ours=True, use_cache=use_cache)
    loop, _ = _run_layer(tiny_model(TINY, torch.bfloat16), torch.bfloat16, ours=False, use_cache=use_cache)
    ours, loop = signature(ours.values()), signature(loop.values())
    scan = [((1, S, W), torch.float32, S * W * FP32), ((1, S - 1, W), torch.float32, (S - 1) * W * FP32)]
    assert sorted(scan, key=str) == sorted((e for e in ours if e[1] == torch.float32 and e[0][-1] == W), key=str)
    outside = [e for e in ours if e not in scan]
    assert outside == [e for e in loop if not (e[0] == (1, W) and e[1] == torch.float32)]
    assert sum(n for *_, n in ours) == sum(n for *_, n in loop)


def test_the_op_computes_what_transformers_loop_computes():
    """fp32 on CPU: the layer through speccat::rg_lru_scan gives the gradients of every parameter
    and of its input that transformers' loop gives."""
    model = tiny_model(TINY, torch.float32)
    _, ours = _run_layer(model, torch.float32, ours=True)
    model.zero_grad()
    _, reference = _run_layer(model, torch.float32, ours=False)
    assert_same_grads(ours, reference)


def test_the_op_against_the_recurrence_written_as_sums():
    """The op's outputs (the states, the last state) and its gradients for x and a, fp64, against
    h_t = Σ_{i≤t} (Π_{i<j≤t} a_j)·x_i + (Π_{j≤t} a_j)·h0, written without a loop; the last state's
    gradient is taken too."""
    from speccat.census.kernels.rglru import rg_lru_scan

    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 7, 3, generator=g, dtype=torch.float64)
    a = torch.rand(2, 7, 3, generator=g, dtype=torch.float64)
    h0 = torch.randn(2, 3, generator=g, dtype=torch.float64)
    dy, dlast = torch.randn(2, 7, 3, generator=g, dtype=torch.float64), torch.randn(2, 3, generator=g, dtype=torch.float64)

    def sums(x, a):
        logs = torch.cumsum(torch.log(a), dim=1)  # Σ_{j≤t} log a_j
        decay = torch.exp(logs.unsqueeze(2) - logs.unsqueeze(1))  # (b, t, i, w): Π_{i<j≤t} a_j
        decay = decay * torch.tril(torch.ones(7, 7, dtype=x.dtype)).view(1, 7, 7, 1)
        h = (decay * x.unsqueeze(1)).sum(2) + torch.exp(logs) * h0.unsqueeze(1)
        return h, h[:, -1]

    results = []
    for function in (lambda x, a: rg_lru_scan(x, a, h0.to(torch.float32))[:2], sums):
        leaves = [t.clone().requires_grad_(True) for t in (x, a)]
        out, last = function(*leaves)
        results.append((out, last, *torch.autograd.grad((out, last), leaves, (dy.to(out.dtype), dlast.to(last.dtype)))))
    for mine, exact in zip(*results):
        torch.testing.assert_close(mine.double(), exact, rtol=1e-6, atol=1e-6)


def test_a_start_state_with_a_gradient_or_one_token_is_refused():
    from speccat.census.kernels.rglru import speccat_rnn_scan

    x, a = torch.randn(1, 4, 3), torch.rand(1, 4, 3)
    reset = torch.zeros(1, 4, 1, dtype=torch.bool)
    with pytest.raises(ValueError, match="linear mode"):
        speccat_rnn_scan(None, x, a, reset, torch.zeros(1, 3, requires_grad=True))
    with pytest.raises(ValueError, match="linear mode"):
        speccat_rnn_scan(None, x[:, :1], a[:, :1], reset[:, :1], None)


def test_recurrent_gemma_gives_its_kinds_counts_and_facts(spec):
    """Two recurrent blocks, then a sliding-window attention block (block_types), repeated: the
    recurrent kind's mixer is rglru, its projections x, y and out (attMM 3), one recurrence; the
    MLP (gate, up, down) keeps as a gated GELU MLP, the block's own GELU not counted in it."""
    assert spec["layers"] == [{"kind": "rglru_dense", "count": 2}, {"kind": "full_dense", "count": 1}]
    assert spec["flavours"]["rglru_dense"] == {"attention": "rglru", "ffn": "dense"}
    ops = spec["ops"]["rglru_dense"]
    assert {op: ops[op] for op in ("attMM", "attBMM", "softmax", "linrec", "ffMM", "ffAct", "normOp")} == {
        "attMM": 3, "attBMM": 0, "softmax": 0, "linrec": 1, "ffMM": 3, "ffAct": 1, "normOp": 2,
    }  # fmt: skip
    assert (spec["lru_width"], spec["lru_conv_kernel"], spec["intermediate_size"]) == (W, K, I // 2)
    assert spec["variants"]["rglru_dense"]["act_saved"] == spec["variants"]["full_dense"]["act_saved"] == 1
    assert spec["measured"]["rglru_dense"]["attention_impl"] == "speccat::rg_lru_scan"


@pytest.mark.parametrize("seq", [S, 512])
def test_the_recurrent_kind_is_priced_as_measured(seq):
    """The rglru slot's price of the recurrent kind (its attention kind is priced by the usual
    slots; at these tiny widths the norms' fp32 weight copies, per layer, weigh more than at
    the registry's)."""
    spec = run_census(TINY, name="tiny-recurrent-gemma", seq_length=seq)
    priced, measured = priced_vs_measured(spec, seq)["rglru_dense"]
    assert abs(priced / measured - 1) <= 0.01, (priced, measured)
