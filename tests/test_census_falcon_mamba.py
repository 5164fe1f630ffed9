"""falcon-mamba's Mamba mixer (docs/census.md, "State-space mixers"): in training it calls the
fused `mamba_inner_fn` with norm weights for B, C and Δ, which mamba_ssm's MambaInnerFn applies
inside the kernel (B and C over the state, Δ over the inner width after the dt projection). The
census runs it through `speccat::mamba_inner` with those norms: what it books for one layer is
checked against a real CPU forward and backward, storage by storage; the op's numbers against
MambaInnerFn's function written from the mixer's own modules and transformers' torch scan; and
the default config priced against measured at every point.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from layer_runs import assert_same_grads, saves_and_grads, tiny_model

from speccat.catalogue.records.head import load_head
from speccat.catalogue.records.points import check_prices, measured_per_token, price_ends, price_points
from speccat.census import run_census
from speccat.census.family import family_for

BF16, FP32 = 2, 4
H, D, N, R, W, S = 32, 64, 4, 6, 4, 32  # hidden, inner, state, dt rank, conv width, tokens
TINY_FALCON_MAMBA = {
    "model_type": "falcon_mamba", "hidden_size": H, "intermediate_size": D, "state_size": N, "time_step_rank": R,
    "conv_kernel": W, "num_hidden_layers": 2, "vocab_size": 128, "torch_dtype": "bfloat16",
}  # fmt: skip


def _model(dtype):
    return tiny_model(TINY_FALCON_MAMBA, dtype)


def _fused(monkeypatch):
    from transformers.models.falcon_mamba import modeling_falcon_mamba

    from speccat.census.scans import speccat_mamba_inner_fn

    monkeypatch.setattr(modeling_falcon_mamba, "mamba_inner_fn", speccat_mamba_inner_fn)


def test_the_census_books_what_the_kernel_keeps_storage_by_storage(monkeypatch):
    """A real bf16 forward and backward of one layer through speccat::mamba_inner (with the B, C
    and Δ norms) keeps exactly what the plain Mamba kernel keeps (the norms add no saved tensor:
    B and C are kept after their norm, the weights are buffers), and the census books it."""
    spec = run_census(TINY_FALCON_MAMBA, name="tiny-falcon-mamba", seq_length=S)
    assert spec["layers"] == [{"kind": "mamba", "count": 2}]
    assert spec["measured"]["mamba"]["attention_impl"] == "speccat::mamba_inner"
    assert not spec["variants"]["mamba"]["scan_apart"] and not spec["variants"]["mamba"]["scan_norms"]
    model = _model(torch.bfloat16)
    _fused(monkeypatch)
    x = torch.randn(1, S, H, dtype=torch.bfloat16, requires_grad=True)
    kept, _ = saves_and_grads(model, model.backbone.layers[0], x, square=False)
    kept = list(kept.values())
    f32, bf16 = torch.float32, torch.bfloat16
    expected = [
        ((1, S, H), f32), ((1, S, 1), f32), ((1, S, H), bf16),  # the block's RMSNorm
        ((S, H), bf16),  # in_proj's input
        ((D, N), f32),  # exp(A_log)
        # the fused kernel: xz, x_dbl, A, B and C (normalised, contiguous copies), D and dt's
        # bias in fp32, the fp32 chunk states, the scan's output before the gate
        ((1, 2 * D, S), bf16), ((S, R + 2 * N), bf16), ((D, N), f32), ((1, 1, N, S), bf16), ((1, 1, N, S), bf16),
        ((D,), f32), ((D,), f32), ((1, D, 1, 2 * N), f32), ((1, D, S), bf16),
    ]  # fmt: skip
    assert sorted(((tuple(t.shape), t.dtype) for t in kept), key=str) == sorted(expected, key=str)
    booked = spec["measured"]["mamba"]["bytes_per_token"]
    assert sum(booked.values()) * S == sum(t.untyped_storage().nbytes() for t in kept)
    assert booked["linrec"] * S == S * BF16 * (2 * D + R + 2 * N + 2 * N + D) + FP32 * (D * 2 * N + D * N + 2 * D)


def _inner_fn_with_norms(mixer, h):
    """MambaInnerFn's function with falcon-mamba's norms, from the mixer's own modules and
    transformers' torch scan: Δ is normalised over the inner width after the dt projection
    (the torch path of transformers normalises the rank-wide input instead: another function)."""
    from transformers.models.falcon_mamba.modeling_falcon_mamba import mamba_selective_scan

    x, z = mixer.in_proj(h).transpose(1, 2).chunk(2, dim=1)
    u = F.silu(mixer.conv1d(x)[..., :S])
    dt, B, C = torch.split(mixer.x_proj(u.transpose(1, 2)), [R, N, N], dim=-1)
    delta = mixer.dt_layernorm(dt @ mixer.dt_proj.weight.t())
    A = -torch.exp(mixer.A_log.float())
    B, C = mixer.b_layernorm(B), mixer.c_layernorm(C)
    y = mamba_selective_scan(
        u, delta.transpose(1, 2), A, B.transpose(1, 2), C.transpose(1, 2), D=mixer.D.float(), z=z,
        delta_bias=mixer.dt_proj.bias.float(), delta_softplus=True,
    )  # fmt: skip
    return mixer.out_proj(y.transpose(1, 2))


def test_the_kernel_op_computes_mamba_inner_fn_with_the_norms(monkeypatch):
    """fp32 on CPU: speccat::mamba_inner with the norm weights gives MambaInnerFn's function's
    output and gradients (of the input and every parameter)."""
    model = _model(torch.float32)
    mixer = model.backbone.layers[0].mixer
    torch.manual_seed(1)
    h = torch.randn(1, S, H)
    results = []
    for run in ("kernel", "reference"):
        model.zero_grad()
        x = h.clone().requires_grad_(True)
        if run == "kernel":
            _fused(monkeypatch)
            out = mixer(x)
            monkeypatch.undo()
        else:
            out = _inner_fn_with_norms(mixer, x)
        out.square().sum().backward()
        results.append({"out": out.detach(), "x": x.grad} | {n: p.grad.clone() for n, p in mixer.named_parameters()})
    kernel, reference = results
    assert_same_grads(kernel, reference)


def test_the_default_falcon_mamba_is_priced_within_one_percent_at_every_point(records, grid):
    from bench.bench_registry import default_config

    spec = run_census(default_config("falcon_mamba"), name="falcon_mamba", across=True).to_dict()
    assert spec["layers"] == [{"kind": "mamba", "count": 32}]
    assert (spec["ssm_inner_size"], spec["ssm_state_size"], spec["ssm_dt_rank"]) == (1536, 16, 48)
    defaults = family_for(spec["arch"]).pricing_defaults()
    rows = price_points(spec, defaults, records, grid) + price_ends(spec, defaults, records, grid, load_head(records))
    measured = measured_per_token(spec)  # the layers' points and the model's ends
    assert len(rows) == len(measured) >= 10
    worst = max(abs(r["priced_per_token"] / measured[r["kind"], r["point"]] - 1) for r in rows)
    assert worst < 0.01, worst
    check_prices(spec, rows, records)


@pytest.mark.parametrize("weight", ["b_rms_weight", "dt_rms_weight"])
def test_a_norm_weight_changes_what_the_kernel_computes(weight):
    """The norm weights are not ignored: with one, the output differs from the plain kernel's."""
    from speccat.census.scans import speccat_mamba_inner_fn

    torch.manual_seed(2)
    xz, conv, x_proj = torch.randn(1, 2 * D, S), torch.randn(D, 1, W), torch.randn(R + 2 * N, D)
    dt_proj, out_proj, A = torch.randn(D, R), torch.randn(H, D), -torch.rand(D, N)
    plain = speccat_mamba_inner_fn(xz, conv, None, x_proj, dt_proj, out_proj, None, A)
    width = N if weight == "b_rms_weight" else D
    normed = speccat_mamba_inner_fn(xz, conv, None, x_proj, dt_proj, out_proj, None, A, **{weight: torch.ones(width)})
    assert plain.shape == normed.shape and not torch.allclose(plain, normed)
