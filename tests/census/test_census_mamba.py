"""Mamba mixers (docs/census.md, "State-space mixers"): what the census books for one layer, checked
against a real CPU forward and backward of the same layer, storage by storage, and against the
shapes worked by hand; the spec of a real config read by hand; priced against measured.

The census runs the mixer through `speccat::mamba_inner`, which keeps what mamba_ssm's fused
`mamba_inner_fn` keeps. transformers' own CPU path (its "slow" path, taken when mamba_ssm is not
installed) computes the same function but keeps other tensors: the last test states exactly how
the two sets relate.
"""

from __future__ import annotations

import pytest
import torch
from conftest import load_shipped
from support.layer_runs import assert_same_grads, saves_and_grads, signature, tiny_model

from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.settings import load_settings
from speccat.census import run_census

BF16, FP32 = 2, 4
H, D, N, R, W, S = 32, 64, 4, 6, 4, 32  # hidden, inner, state, dt rank, conv width, tokens
TINY_MAMBA = {
    "model_type": "mamba", "hidden_size": H, "intermediate_size": D, "state_size": N, "time_step_rank": R,
    "conv_kernel": W, "num_hidden_layers": 2, "vocab_size": 128, "torch_dtype": "bfloat16",
}  # fmt: skip
MAMBA_130M = "ArthurZ/mamba-130m"


def _model(dtype):
    return tiny_model(TINY_MAMBA, dtype)


def _run_layer(model, dtype, fused: bool, monkeypatch):
    """One real forward and backward of layer 0: (the storages it saved, by storage, and the grads)."""
    from transformers.models.mamba import modeling_mamba

    from speccat.census.kernels.mamba_inner import speccat_mamba_inner_fn

    if fused:
        monkeypatch.setattr(modeling_mamba, "mamba_inner_fn", speccat_mamba_inner_fn)
    else:
        monkeypatch.setattr(modeling_mamba, "mamba_inner_fn", lambda *a, **k: None)  # transformers' fallback: the slow path
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=dtype, requires_grad=True)
    kept, grads = saves_and_grads(model, model.backbone.layers[0], x)
    monkeypatch.undo()
    return kept, grads


def test_the_census_books_what_the_kernel_keeps_storage_by_storage(monkeypatch):
    """A real bf16 forward and backward of one layer through speccat::mamba_inner on CPU keeps
    exactly these storages (worked by hand from the shapes), and the census books their bytes."""
    spec = run_census(TINY_MAMBA, name="tiny-mamba", seq_length=S)
    kept, _ = _run_layer(_model(torch.bfloat16), torch.bfloat16, True, monkeypatch)
    f32, bf16 = torch.float32, torch.bfloat16
    expected = [
        # the RMSNorm: its fp32 upcast input, the fp32 rstd, the normalised input cast back to bf16
        # that the weight multiplies
        ((1, S, H), f32), ((1, S, 1), f32), ((1, S, H), bf16),
        # in_proj's input: the norm's output (the weight's product), seen 2-D by the matmul
        ((S, H), bf16),
        # exp(A_log) in fp32, kept by exp's backward (A is its negation, a tensor of its own)
        ((D, N), f32),
        # the fused kernel: xz (its own contiguous copy), x_dbl, A, B and C (contiguous copies),
        # D and dt's bias in fp32, the fp32 chunk states (one chunk: S < 2048; a decay product and
        # a state per state channel), the scan's output before the gate
        ((1, 2 * D, S), bf16), ((S, R + 2 * N), bf16), ((D, N), f32), ((1, 1, N, S), bf16), ((1, 1, N, S), bf16),
        ((D,), f32), ((D,), f32), ((1, D, 1, 2 * N), f32), ((1, D, S), bf16),
    ]  # fmt: skip
    real = signature(kept.values())
    assert sorted(((shape, dtype) for shape, dtype, _ in real), key=str) == sorted(expected, key=str)
    real_total = sum(nbytes for _, _, nbytes in real)
    assert spec["measured"]["mamba"]["attention_impl"] == "speccat::mamba_inner"
    booked = spec["measured"]["mamba"]["bytes_per_token"]
    assert sum(booked.values()) * S == real_total
    # and op by op, worked by hand
    assert booked["normOp"] * S == S * (FP32 * H + FP32 + BF16 * H)
    assert booked["attMM"] * S == S * BF16 * H + FP32 * D * N
    assert booked["linrec"] * S == S * BF16 * (2 * D + R + 2 * N + 2 * N + D) + FP32 * (D * 2 * N + D * N + 2 * D)


def test_the_kernel_op_computes_what_the_slow_path_computes(monkeypatch):
    """fp32 on CPU: speccat::mamba_inner's output and every gradient equal transformers' slow path."""
    model = _model(torch.float32)
    _, fused = _run_layer(model, torch.float32, True, monkeypatch)
    model.zero_grad()
    _, slow = _run_layer(model, torch.float32, False, monkeypatch)
    assert_same_grads(fused, slow)


def test_the_slow_path_keeps_the_recomputed_tensors_the_kernel_does_not(monkeypatch):
    """How the kernel's saved set relates to transformers' slow path (bf16, real tensors).

    Kept by both, the same storages: the norm's tensors, in_proj's input, exp(A_log), and the
    in-projection's output (2·inner per token: the kernel keeps a contiguous copy of it, the slow
    path the storage itself, which its conv's input is a view of).
    Kept by the kernel only: x_dbl's own copy, B and C as contiguous copies, the scan's output,
    the chunk states, A, D and dt's bias as tensors of their own (the slow path keeps views or
    per-step pieces of these instead).
    Kept by the slow path only, all recomputed by the kernel in backward: the conv's output and
    its SiLU, Δ before and after the softplus, and, per token, (inner × state)-wide fp32
    tensors: exp(Δ·A) and Δ·B·u over the whole sequence, and each step's state. Those alone
    outweigh everything the kernel keeps.
    """
    kept_kernel, _ = _run_layer(_model(torch.bfloat16), torch.bfloat16, True, monkeypatch)
    kept_slow, _ = _run_layer(_model(torch.bfloat16), torch.bfloat16, False, monkeypatch)
    kernel, slow = signature(kept_kernel.values()), signature(kept_slow.values())
    shared = [((1, S, H), torch.float32), ((1, S, H), torch.bfloat16), ((D, N), torch.float32), ((1, S, 2 * D), torch.bfloat16)]
    slow_pairs = {(shape, dtype) for shape, dtype, _ in slow}
    for shape, dtype in shared[:3]:
        assert (shape, dtype) in {(s, d) for s, d, _ in kernel} and (shape, dtype) in slow_pairs, (shape, dtype)
    # the in-projection's output: the slow path keeps its storage (its conv input is a transposed view)
    assert any(nbytes == BF16 * S * 2 * D and dtype == torch.bfloat16 for _, dtype, nbytes in slow)
    # the whole-sequence (inner × state) fp32 tensors of the slow path: exp(Δ·A) and Δ·B·u
    whole = [r for r in slow if r[1] == torch.float32 and r[2] == FP32 * D * S * N]
    assert len(whole) >= 2, whole
    # each step's state (b, inner, state) is kept by the step's products: S of them at least
    steps = [r for r in slow if r[2] in (BF16 * D * N, FP32 * D * N) and r[0] != (D, N)]
    assert len(steps) >= S, len(steps)
    kernel_total = sum(n for _, _, n in kernel)
    assert sum(n for _, _, n in whole) > kernel_total


def _spec_130m():
    return run_census(load_shipped(MAMBA_130M), name="mamba-130m", seq_length=4096)


def test_mamba_130m_gives_the_kinds_and_dims_its_config_states():
    """ArthurZ/mamba-130m: n_layer 24, d_model 768, intermediate 1536 (expand 2), state 16,
    time_step_rank 48, conv 4, vocab 50280; a block is a norm and a mixer (no MLP)."""
    spec = _spec_130m()
    assert spec["layers"] == [{"kind": "mamba", "count": 24}]
    assert spec["flavours"] == {"mamba": {"attention": "mamba", "ffn": "none"}}
    assert (spec["hidden_size"], spec["vocab_size"], spec["num_hidden_layers"]) == (768, 50280, 24)
    assert (spec["ssm_inner_size"], spec["ssm_state_size"], spec["ssm_dt_rank"], spec["ssm_conv_kernel"]) == (1536, 16, 48, 4)
    # in, x, dt and out projections; one norm; one scan; no feed-forward, no attention
    ops = spec["ops"]["mamba"]
    assert (ops["attMM"], ops["normOp"], ops["linrec"], ops["ffMM"], ops["attBMM"], ops["softmax"]) == (4, 1, 1, 0, 0, 0)


@pytest.mark.parametrize("seq", [4096, 1000])
def test_mamba_is_priced_as_measured(seq):
    """The records' mamba slot, from dims and dtypes only, within 2% of the census's measurement
    (4096 tokens: two scan chunks; 1000: one, and the per-layer constants weigh more per token)."""
    spec = run_census(load_shipped(MAMBA_130M), name="mamba-130m", seq_length=seq)
    records, grid = load_records(), load_settings()
    one = grid.with_settings([grid.setting({"seq_length": seq})])
    prices = price_layers(spec, records, one)
    (kind,) = prices.kinds
    priced = float(prices.total[0, 0, 0]) / seq
    measured = sum(spec["measured"][kind]["bytes_per_token"].values())
    assert abs(priced / measured - 1) <= 0.02, (priced, measured)
