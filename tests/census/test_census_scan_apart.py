"""A Mamba mixer that calls the selective scan apart from its causal conv1d (jamba's; docs/census.md,
"State-space mixers"): what the census books for one layer, checked against a real CPU forward
and backward of the same layer, storage by storage; the op's numbers against transformers'
torch path; and the default config priced against measured at every point.

The census runs the scan through `speccat::selective_scan` (what mamba_ssm's SelectiveScanFn
keeps) and the conv through `speccat::causal_conv1d`; the projections, jamba's norms on dt, B
and C, and the gate's layout run as transformers' own torch code.
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import assert_same_grads, layer_saves, saves_and_grads, signature, tiny_model

from speccat.catalogue.records.ends import load_ends
from speccat.catalogue.records.points import check_prices, measured_per_token, price_ends, price_points
from speccat.census import run_census

BF16, FP32 = 2, 4
H, D, N, R, W, S, F = 32, 64, 4, 6, 4, 32, 48  # hidden, inner (2·hidden), state, dt rank, conv width, tokens, MLP width
TINY_JAMBA = {
    "model_type": "jamba", "hidden_size": H, "intermediate_size": F, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "mamba_d_state": N, "mamba_d_conv": W, "mamba_expand": 2, "mamba_dt_rank": R,
    "num_experts": 1, "num_experts_per_tok": 1, "attn_layer_period": 2, "attn_layer_offset": 1, "vocab_size": 128, "torch_dtype": "bfloat16",
}  # fmt: skip


def _model(dtype):
    return tiny_model(TINY_JAMBA, dtype)


def _run_layer(model, dtype, kernels: bool, monkeypatch):
    """One real forward and backward of layer 0 (a Mamba layer): (its saved storages, the grads).
    With `kernels`, the scan and conv run through speccat's ops; else transformers' torch code."""
    from transformers.models.jamba import modeling_jamba

    from speccat.census.kernels.causal_conv1d import speccat_causal_conv1d_fn
    from speccat.census.kernels.scan_apart import speccat_selective_scan_fn

    if kernels:
        monkeypatch.setattr(modeling_jamba, "mamba_selective_scan", speccat_selective_scan_fn)
        monkeypatch.setattr(modeling_jamba, "causal_conv1d_fn", speccat_causal_conv1d_fn)
    layer = model.model.layers[0]
    assert type(layer.mamba).__name__ == "JambaMambaMixer"
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=dtype, requires_grad=True)
    kept, grads = saves_and_grads(model, layer, x)
    monkeypatch.undo()
    return kept, grads


def test_the_census_books_what_the_kernels_keep_storage_by_storage(monkeypatch):
    """A real bf16 forward and backward of one jamba Mamba layer through speccat's scan and conv
    on CPU keeps exactly these storages (worked by hand from the shapes), and the census books
    their bytes, op by op."""
    spec = run_census(TINY_JAMBA, name="tiny-jamba", seq_length=S)
    kind = spec["layers"][0]["kind"]
    assert spec["measured"][kind]["attention_impl"] == "speccat::selective_scan"
    assert spec["variants"][kind]["scan_apart"] and spec["variants"][kind]["scan_norms"]
    kept, _ = _run_layer(_model(torch.bfloat16), torch.bfloat16, True, monkeypatch)
    f32, bf16 = torch.float32, torch.bfloat16

    def rms(width):  # a JambaRMSNorm: fp32 upcast input, fp32 rstd, bf16 normalised input
        return [((1, S, width), f32, FP32 * S * width), ((1, S, 1), f32, FP32 * S), ((1, S, width), bf16, BF16 * S * width)]

    expected = [
        *rms(H), *rms(H),  # the layer's two norms
        ((S, H), bf16, BF16 * S * H), ((S, H), bf16, BF16 * S * H),  # in_proj's and the MLP's input
        # exp(A_log) in fp32 (A is its negation, a tensor of its own)
        ((D, N), f32, FP32 * D * N),
        # the conv kernel's input: a view of in_proj's whole output (both halves)
        ((1, D, S), bf16, BF16 * S * 2 * D),
        # x_proj's input: the conv's output, seen 2-D (the scan's u is the same storage); the
        # dt projection's input: the dt norm's output; out_proj's input: the gated scan output
        ((S, D), bf16, BF16 * S * D), ((S, R), bf16, BF16 * S * R), ((S, D), bf16, BF16 * S * D),
        *rms(R), *rms(N), *rms(N),  # the norms on dt, B and C
        # the scan: Δ, A, B and C (contiguous copies), D and dt's bias in fp32, z (a contiguous
        # copy of the gate), the fp32 chunk states (one chunk: S < 2048), the output before the gate
        ((1, D, S), bf16, BF16 * S * D), ((D, N), f32, FP32 * D * N), ((1, N, S), bf16, BF16 * S * N), ((1, N, S), bf16, BF16 * S * N),
        ((D,), f32, FP32 * D), ((D,), f32, FP32 * D), ((1, D, S), bf16, BF16 * S * D), ((1, D, 1, 2 * N), f32, FP32 * D * 2 * N),
        ((1, D, S), bf16, BF16 * S * D),
        # the gated MLP: the activation's input, its output and the up projection's output, the down projection's input
        ((1, S, F), bf16, BF16 * S * F), ((1, S, F), bf16, BF16 * S * F), ((1, S, F), bf16, BF16 * S * F), ((S, F), bf16, BF16 * S * F),
    ]  # fmt: skip
    real = signature(kept.values())
    assert real == sorted(expected, key=str)
    booked = spec["measured"][kind]["bytes_per_token"]
    assert sum(booked.values()) * S == sum(nbytes for _, _, nbytes in real)
    assert booked["attMM"] * S == S * BF16 * (H + 2 * D + D + R + D) + FP32 * D * N
    assert booked["normOp"] * S == S * (2 * (FP32 + BF16) * H + (FP32 + BF16) * (R + 2 * N) + 5 * FP32)
    assert booked["linrec"] * S == S * BF16 * (3 * D + 2 * N) + FP32 * (D * 2 * N + D * N + 2 * D)


def test_the_ops_compute_what_the_torch_path_computes(monkeypatch):
    """fp32 on CPU: the layer through speccat's scan and conv gives the output gradients of
    transformers' own torch scan and conv, for the input and every parameter."""
    model = _model(torch.float32)
    _, ours = _run_layer(model, torch.float32, True, monkeypatch)
    model.zero_grad()
    _, torch_path = _run_layer(model, torch.float32, False, monkeypatch)
    assert_same_grads(ours, torch_path)


def test_the_torch_path_keeps_the_per_token_state_tensors_the_kernel_recomputes(monkeypatch):
    """transformers' torch scan (no mamba_ssm) keeps what the kernels recompute: Δ after its bias
    and softplus, and fp32 (inner × state)-wide tensors per token (exp(Δ·A), Δ·B·u) and each
    step's state; those alone outweigh everything the scan kernel keeps. Around the kernels
    (projections, norms, MLP) both keep the same storages."""
    kernel, _ = _run_layer(_model(torch.bfloat16), torch.bfloat16, True, monkeypatch)
    slow, _ = _run_layer(_model(torch.bfloat16), torch.bfloat16, False, monkeypatch)
    kernel_pairs, slow_pairs = signature(kernel.values()), signature(slow.values())
    whole = [p for p in slow_pairs if p[1] == torch.float32 and p[2] == FP32 * D * S * N]
    assert len(whole) >= 2, whole
    steps = [p for p in slow_pairs if p[2] in (BF16 * D * N, FP32 * D * N) and p[0] != (D, N)]
    assert len(steps) >= S, len(steps)
    assert sum(p[2] for p in whole) > sum(p[2] for p in kernel_pairs if p[1] == torch.float32 or p[0][-1] == S)
    # the storages kept by the projections, norms and MLP are the same in both
    outside = [p for p in kernel_pairs if p[0][0] == S or p[0][:2] == (1, S)]
    for pair in outside:
        assert pair in slow_pairs, pair


# zamba: a Mamba mixer scanning per Mamba head (two), and hybrid layers running a transformer
# block (attention and an MLP over the hidden states beside the embeddings, tied between the
# hybrid layers) before their Mamba layer
TINY_ZAMBA = {
    "model_type": "zamba", "hidden_size": 64, "num_hidden_layers": 4, "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"],
    "vocab_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4, "attention_hidden_size": 128, "attention_head_dim": 32,
    "intermediate_size": 128, "n_mamba_heads": 2, "mamba_d_state": 8, "mamba_dt_rank": 4,
}  # fmt: skip


def _real_zamba_layer(index: int, seq: int, monkeypatch, **inputs):
    """One real bf16 forward and backward of tiny zamba's layer `index` on CPU, its scans and conv
    through speccat's ops and its attention through speccat's kernel: the storages it saved."""
    from transformers.models.zamba import modeling_zamba

    from speccat.census.kernels.causal_conv1d import speccat_causal_conv1d_fn
    from speccat.census.kernels.scan_apart import speccat_selective_scan_fn

    kernels = {"mamba_selective_scan": speccat_selective_scan_fn, "causal_conv1d_fn": speccat_causal_conv1d_fn}
    return layer_saves(monkeypatch, modeling_zamba, kernels, TINY_ZAMBA, index, seq, **inputs)


def test_a_mixer_scanning_per_head_is_booked_as_the_real_one_keeps_it(monkeypatch):
    """zamba's mixer runs one selective scan per Mamba head, each over its head's share of the
    inner width with its own x and dt weights (3-D parameters): the census states the whole
    mixer (inner width, heads, dt rank) and books what each scan keeps; a real bf16 forward and
    backward of the Mamba layer and of a hybrid layer (its transformer block first) on CPU keeps
    exactly these storages (worked by hand), and the census books their bytes, op by op."""
    h, di, heads, n, r, s, ff, w2, att_heads = 64, 128, 2, 8, 4, 32, 128, 128, 4
    hd = di // heads
    spec = run_census(TINY_ZAMBA, name="tiny-zamba", seq_length=s)
    kind = {"mamba": "mamba", "hybrid": "full_mamba_dense_block"}
    assert spec["layers"] == [{"kind": kind[t], "count": 1} for t in TINY_ZAMBA["layers_block_type"]]
    assert (spec["ssm_inner_size"], spec["ssm_num_heads"], spec["ssm_dt_rank"], spec["ssm_state_size"], spec["ssm_conv_kernel"]) == (di, heads, r, n, 4)
    assert all(spec["variants"][k]["scan_apart"] and not spec["variants"][k]["scan_norms"] for k in kind.values())
    assert spec["ops"]["mamba"]["linrec"] == heads and spec["measured"]["mamba"]["attention_impl"] == "speccat::selective_scan"
    f32, bf16 = torch.float32, torch.bfloat16
    norm = [((1, s, h), f32, FP32 * s * h), ((1, s, 1), f32, FP32 * s), ((1, s, h), bf16, BF16 * s * h)]  # RMSNorm: fp32 input, rstd, bf16 normalised
    mamba = norm + [
        ((s, h), bf16, BF16 * s * h),  # in_proj's input (the norm's output)
        ((1, di, s), bf16, BF16 * di * s),  # the conv's input (x, contiguous)
        ((1, hd, s), bf16, BF16 * di * s),  # each head's u: a view of the conv's whole output (x_proj's matmul keeps it first)
        ((heads, 4, s), bf16, BF16 * heads * (r + 2 * n) * s),  # the per-head x projections' output: dt (the dt matmul keeps it), B, C
        ((heads, hd, s), bf16, BF16 * di * s),  # Δ of every head (the dt matmul's output)
        ((heads, hd, n), f32, FP32 * di * n),  # exp(A_log), kept by exp
        ((hd, n), f32, FP32 * di * n),  # A = −exp(A_log): each head's a view of one storage
        ((hd,), f32, FP32 * di),  # dt's bias in fp32, each head's a view of one storage
        *[((hd,), f32, FP32 * hd)] * heads,  # D in fp32, one per head
        *[((1, hd, s), bf16, BF16 * hd * s)] * (2 * heads),  # per head: the gate z (made contiguous) and the output before it
        *[((1, hd, 1, 2 * n), f32, FP32 * hd * 2 * n)] * heads,  # per head: the fp32 chunk states
        ((s, di), bf16, BF16 * di * s),  # out_proj's input
    ]
    block = [((1, s, w2), f32, FP32 * s * w2), ((1, s, 1), f32, FP32 * s), ((1, s, w2), bf16, BF16 * s * w2)]  # the norm over two widths
    block += [((s, w2), bf16, BF16 * s * w2)]  # q, k, v projections' input
    block += [((1, att_heads, s, w2 // att_heads), bf16, BF16 * s * w2)] * 3  # q, k, v
    block += [((1, s, att_heads, w2 // att_heads), bf16, BF16 * s * w2), ((1, att_heads, s), f32, FP32 * att_heads * s)]  # output, log-sum-exp
    block += norm  # pre_ff_layernorm, the hidden width
    block += [((s, h), bf16, BF16 * s * h), *[((1, s, ff), bf16, BF16 * s * ff)] * 3, ((s, ff), bf16, BF16 * s * ff)]  # MLP: input, gate (act's input), act's output, up, down's input
    block += [((s, h), bf16, BF16 * s * h)]  # the linear's input
    embeddings = torch.randn(1, s, h, dtype=torch.bfloat16, requires_grad=True)
    for name, index, expected, inputs in [("mamba", 0, mamba, {}), ("full_mamba_dense_block", 3, block + mamba, {"original_hidden_states": embeddings, "layer_idx": 3})]:
        real = signature(_real_zamba_layer(index, s, monkeypatch, **inputs).values())
        assert real == sorted(expected, key=str), name
        measured = spec["measured"][name]["bytes_per_token"]
        assert sum(measured.values()) * s == sum(n for _, _, n in real), name
    # the scans' own saves: Δ, A, dt's bias, and per head D, z, the output and the chunk states
    scans = BF16 * di * s + FP32 * di * n + FP32 * di + heads * (FP32 * hd + 2 * BF16 * hd * s + FP32 * hd * 2 * n)
    assert spec["measured"]["mamba"]["bytes_per_token"]["linrec"] * s == scans
    assert spec["measured"]["full_mamba_dense_block"]["bytes_per_token"]["other"] * s == BF16 * s * h
    assert spec["measured"]["full_mamba_dense_block"]["bytes_per_token"]["ffMM"] * s == BF16 * s * (h + 3 * ff)


@pytest.fixture(scope="module")
def jamba_spec():
    from bench.bench_registry import default_config

    return run_census(default_config("jamba"), name="jamba", across=True).to_dict()


def test_the_default_jamba_is_priced_within_one_percent_at_every_point(jamba_spec, records, grid):
    """jamba's default config (32 layers, 1 attention layer in 8, experts every other layer):
    its Mamba kinds keep the scan apart and its norms; every kind priced from dims, dtypes and
    variant facts within 1% of what the census measured, at every point."""
    kinds = {g["kind"] for g in jamba_spec["layers"]}
    mamba = sorted(k for k in kinds if jamba_spec["flavours"][k]["attention"] == "mamba")
    assert len(mamba) == 2 and all(jamba_spec["variants"][k]["scan_apart"] for k in mamba)
    assert (jamba_spec["ssm_inner_size"], jamba_spec["ssm_state_size"], jamba_spec["ssm_dt_rank"], jamba_spec["ssm_conv_kernel"]) == (8192, 16, 256, 4)
    rows = price_points(jamba_spec, records, grid) + price_ends(jamba_spec, records, grid, load_ends(records))
    measured = measured_per_token(jamba_spec)  # the layers' points and the model's ends
    assert len(rows) == len(measured) and {r["kind"] for r in rows if not r["kind"].startswith("end:")} == kinds
    assert {r["point"] for r in rows} >= {"census", "tp 2", "tp 8", "cp 2", "recompute all"}
    worst = max(abs(r["priced_per_token"] / measured[r["kind"], r["point"]] - 1) for r in rows)
    assert worst < 0.01, worst
    check_prices(jamba_spec, rows, records)
