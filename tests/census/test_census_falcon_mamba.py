"""falcon-mamba's Mamba mixer (docs/census.md, "State-space mixers"). Since transformers 5.25 it
has no fused path: in training it runs the causal conv1d kernel, its projections and the norms on
B, C and Δ in torch, then the selective scan kernel (the scan apart, as jamba's). What the census
books for one layer is checked against a real CPU forward and backward through speccat's conv and
scan; the ops' numbers against transformers' torch path; the default config priced against
measured at every point; and speccat::mamba_inner's norm weights, which a fused mixer with norms
passes, against the plain kernel.
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import assert_same_grads, saves_and_grads, signature, tiny_model

from speccat.catalogue.records.ends import load_ends
from speccat.catalogue.records.points import check_prices, measured_per_token, price_ends, price_points
from speccat.census import run_census

BF16, FP32 = 2, 4
H, D, N, R, W, S = 32, 64, 4, 6, 4, 32  # hidden, inner, state, dt rank, conv width, tokens
TINY_FALCON_MAMBA = {
    "model_type": "falcon_mamba", "hidden_size": H, "intermediate_size": D, "state_size": N, "time_step_rank": R,
    "conv_kernel": W, "num_hidden_layers": 2, "vocab_size": 128, "torch_dtype": "bfloat16",
}  # fmt: skip


def _model(dtype):
    return tiny_model(TINY_FALCON_MAMBA, dtype)


def _run_layer(model, monkeypatch, kernels: bool):
    """One real forward and backward of layer 0: (its saved storages, the grads). With `kernels`,
    the conv and the scan run through speccat's ops; else transformers' torch code."""
    from transformers.models.falcon_mamba import modeling_falcon_mamba

    from speccat.census.kernels.causal_conv1d import speccat_causal_conv1d_fn
    from speccat.census.kernels.scan_apart import speccat_selective_scan_fn

    if kernels:
        monkeypatch.setattr(modeling_falcon_mamba, "mamba_selective_scan", speccat_selective_scan_fn)
        monkeypatch.setattr(modeling_falcon_mamba, "causal_conv1d_fn", speccat_causal_conv1d_fn)
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=next(model.parameters()).dtype, requires_grad=True)
    kept, grads = saves_and_grads(model, model.backbone.layers[0], x, square=False)
    monkeypatch.undo()
    return kept, grads


def test_the_census_books_what_the_kernels_keep_storage_by_storage(monkeypatch):
    """transformers 5.25 dropped falcon-mamba's fused path (mamba_inner_fn could only normalise Δ
    after its projection, and falcon-mamba normalises it before): in training the mixer runs the
    causal conv1d, its projections and norms in torch, then the selective scan, as jamba's does.
    A real bf16 forward and backward of one layer through speccat's conv and scan keeps what the
    census books, byte for byte; the scan's share is worked by hand from the shapes."""
    spec = run_census(TINY_FALCON_MAMBA, name="tiny-falcon-mamba", seq_length=S)
    assert spec["layers"] == [{"kind": "mamba", "count": 2}]
    assert spec["measured"]["mamba"]["attention_impl"] == "speccat::selective_scan"
    assert spec["variants"]["mamba"]["scan_apart"] and spec["variants"]["mamba"]["scan_norms"]
    kept, _ = _run_layer(_model(torch.bfloat16), monkeypatch, kernels=True)
    real = signature(kept.values())
    booked = spec["measured"]["mamba"]["bytes_per_token"]
    assert sum(booked.values()) * S == sum(nbytes for _, _, nbytes in real)
    # the scan: Δ, B and C (contiguous copies), z, the output before the gate (bf16), A, D and
    # dt's bias and the chunk states (fp32), one chunk since S < 2048
    assert booked["linrec"] * S == S * BF16 * (3 * D + 2 * N) + FP32 * (D * 2 * N + D * N + 2 * D)
    # the conv kernel's input is a view of in_proj's whole output (both halves), kept once
    assert ((1, D, S), torch.bfloat16, BF16 * S * 2 * D) in real


def test_the_ops_compute_what_the_torch_path_computes(monkeypatch):
    """fp32 on CPU: the mixer through speccat's conv and scan gives the output and gradients of
    transformers' own torch conv and scan, for the input and every parameter."""
    model = _model(torch.float32)
    _, ours = _run_layer(model, monkeypatch, kernels=True)
    model.zero_grad()
    _, torch_path = _run_layer(model, monkeypatch, kernels=False)
    assert_same_grads(ours, torch_path)


def test_the_default_falcon_mamba_is_priced_within_one_percent_at_every_point(records, grid):
    from bench.bench_registry import default_config

    spec = run_census(default_config("falcon_mamba"), name="falcon_mamba", across=True).to_dict()
    assert spec["layers"] == [{"kind": "mamba", "count": 32}]
    assert (spec["ssm_inner_size"], spec["ssm_state_size"], spec["ssm_dt_rank"]) == (1536, 16, 48)
    rows = price_points(spec, records, grid) + price_ends(spec, records, grid, load_ends(records))
    measured = measured_per_token(spec)  # the layers' points and the model's ends
    assert len(rows) == len(measured) >= 10
    worst = max(abs(r["priced_per_token"] / measured[r["kind"], r["point"]] - 1) for r in rows)
    assert worst < 0.01, worst
    check_prices(spec, rows, records)


@pytest.mark.parametrize("weight", ["b_rms_weight", "dt_rms_weight"])
def test_a_norm_weight_changes_what_the_kernel_computes(weight):
    """The norm weights are not ignored: with one, the output differs from the plain kernel's."""
    from speccat.census.kernels.mamba_inner import speccat_mamba_inner_fn

    torch.manual_seed(2)
    xz, conv, x_proj = torch.randn(1, 2 * D, S), torch.randn(D, 1, W), torch.randn(R + 2 * N, D)
    dt_proj, out_proj, A = torch.randn(D, R), torch.randn(H, D), -torch.rand(D, N)
    plain = speccat_mamba_inner_fn(xz, conv, None, x_proj, dt_proj, out_proj, None, A)
    width = N if weight == "b_rms_weight" else D
    normed = speccat_mamba_inner_fn(xz, conv, None, x_proj, dt_proj, out_proj, None, A, **{weight: torch.ones(width)})
    assert plain.shape == normed.shape and not torch.allclose(plain, normed)
