"""Hybrid layers: softmax attention beside a Mamba2 mixer in one layer (falcon_h1's parallel
hybrid; docs/census.md, "State-space mixers"): what the census books for one such layer against
a real CPU forward and backward of the same layer, storage by storage; the layer through the
census's kernels computes what transformers' own path computes; its kind, flavours and counts;
priced within the records' tolerance at every point the census measures it at, tp ranks
included (a Mamba2 mixer is whole on every transformers tp rank); and a hybrid whose attention
runs in a block of its own (zamba2's shared transformer block: tests/census/test_census_shared_block.py
compares it with a real layer) named apart from falcon_h1's.

The census runs the attention through `speccat::flash_attention` (what a flash kernel keeps: q,
k, v, its output and the fp32 log-sum-exp) and the mixer through
`speccat::mamba_split_conv1d_scan` (what mamba_ssm's fused `mamba_split_conv1d_scan_combined`
keeps: zxbcdt, the scan's output, the gated norm's rstd).
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import assert_same_grads, saves_and_grads, signature, tiny_model

from speccat.census import run_census
from speccat.census.spec import SpecError

BF16, FP32 = 2, 4
H, HEADS, KV, FF, S = 32, 4, 2, 64, 32  # hidden, attention heads, kv heads, MLP width, tokens
DH = H // HEADS
MH, P, G, N = 4, 16, 2, 8  # ssm heads, ssm head dim, groups, state
DI = MH * P
TINY_FALCON_H1 = {
    "model_type": "falcon_h1", "hidden_size": H, "intermediate_size": FF, "num_hidden_layers": 2, "num_attention_heads": HEADS,
    "num_key_value_heads": KV, "vocab_size": 128, "max_position_embeddings": 64, "mamba_d_ssm": DI, "mamba_n_heads": MH,
    "mamba_d_head": P, "mamba_n_groups": G, "mamba_d_state": N, "mamba_d_conv": 4, "mamba_chunk_size": 8,
    "mamba_norm_before_gate": False, "torch_dtype": "bfloat16",
}  # fmt: skip
WIDTH = 2 * DI + 2 * G * N + MH  # the in-projection's output: z, x, B, C, dt


def _config(rms_norm: bool) -> dict:
    return {**TINY_FALCON_H1, "mamba_rms_norm": rms_norm}


def _run_layer(config: dict, dtype, fused: bool, monkeypatch):
    """One real forward and backward of layer 0, through the census's kernels (speccat attention,
    the fused SSD op) or transformers' own path (sdpa, its torch scan): (storages saved, gradients)."""
    from transformers.models.falcon_h1 import modeling_falcon_h1

    from speccat.census.kernels.attention import ATTENTION_IMPL, register
    from speccat.census.kernels.ssd import speccat_mamba_split_conv1d_scan_combined

    register()
    kernel = speccat_mamba_split_conv1d_scan_combined if fused else (lambda *a, **k: None)  # None: transformers' torch path
    monkeypatch.setattr(modeling_falcon_h1, "mamba2_split_conv1d_scan_combined", kernel)
    model = tiny_model({**config, "attn_implementation": ATTENTION_IMPL if fused else "sdpa"}, dtype)
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=dtype, requires_grad=True)
    rotary = model.model.rotary_emb(x, torch.arange(S).unsqueeze(0))
    kept, grads = saves_and_grads(model, model.model.layers[0], x, position_embeddings=rotary)
    monkeypatch.undo()
    rotary_storages = {t.untyped_storage()._cdata for t in rotary}  # the model's rotary tables: every layer's input, no layer's
    return {k: t for k, t in kept.items() if k not in rotary_storages}, grads


@pytest.mark.parametrize("rms_norm", [False, True])
def test_the_census_books_what_the_kernels_keep_storage_by_storage(rms_norm, monkeypatch):
    config = _config(rms_norm)
    spec = run_census(config, name="tiny-falcon-h1", seq_length=S)
    assert spec["flavours"] == {"full_mamba2_dense": {"attention": "full_mamba2", "ffn": "dense"}}
    kept, _ = _run_layer(config, torch.bfloat16, True, monkeypatch)
    f32, bf16 = torch.float32, torch.bfloat16
    expected = [
        # two RMSNorms (before the mixers, before the MLP): fp32 upcast input, fp32 rstd, the
        # bf16 normalised input
        *[((1, S, H), f32), ((1, S, 1), f32), ((1, S, H), bf16)] * 2,
        # the mixer's in_proj input and the attention's q/k/v input: each the norm's output
        # times its own multiplier, two tensors; exp(A_log) in fp32 (one per ssm head)
        ((S, H), bf16), ((S, H), bf16), ((MH,), f32),
        # the attention kernel: q, k, v; its output (o_proj's input, a view of it) and the fp32
        # log-sum-exp per head
        ((1, HEADS, S, DH), bf16), ((1, KV, S, DH), bf16), ((1, KV, S, DH), bf16),
        ((1, S, HEADS, DH), bf16), ((1, HEADS, S), f32),
        # the fused SSD kernel: zxbcdt, the scan's output, A (fp32), the gated norm's rstd per
        # group and token (an empty tensor when the mixer has no norm)
        ((1, S, WIDTH), bf16), ((1, S, MH, P), bf16), ((MH,), f32), ((G, S) if rms_norm else (0,), f32),
        # the gated MLP: its input, the gate's output (SiLU's input), SiLU's output, the up
        # output and the product (down_proj's input)
        ((S, H), bf16), ((1, S, FF), bf16), ((1, S, FF), bf16), ((1, S, FF), bf16), ((S, FF), bf16),
    ]  # fmt: skip
    real = signature(kept.values())
    assert sorted(((shape, dtype) for shape, dtype, _ in real), key=str) == sorted(expected, key=str)
    booked = spec["measured"]["full_mamba2_dense"]["bytes_per_token"]
    assert sum(booked.values()) * S == sum(n for _, _, n in real)
    assert booked["attMM"] * S == 2 * S * BF16 * H + FP32 * MH  # both mixers' inputs, exp(A_log)
    assert booked["attBMM"] * S == S * BF16 * (HEADS + 2 * KV) * DH
    assert booked["softmax"] * S == S * (BF16 * H + FP32 * HEADS)
    assert booked["linrec"] * S == S * (BF16 * WIDTH + BF16 * DI + FP32 * G * rms_norm) + FP32 * MH
    assert spec["measured"]["full_mamba2_dense"]["attention_impl"] == "speccat::flash_attention+speccat::mamba_split_conv1d_scan"


@pytest.mark.parametrize("rms_norm", [False, True])
def test_the_kernels_compute_what_transformers_computes(rms_norm, monkeypatch):
    """fp32 on CPU: the layer through speccat's attention and SSD op gives the output gradients
    and every parameter's gradient transformers' sdpa and torch scan give."""
    _, fused = _run_layer(_config(rms_norm), torch.float32, True, monkeypatch)
    _, slow = _run_layer(_config(rms_norm), torch.float32, False, monkeypatch)
    assert_same_grads(fused, slow)


def test_the_hybrid_counts_both_mixers():
    spec = run_census(_config(True), name="tiny-falcon-h1", seq_length=S)
    ops = spec["ops"]["full_mamba2_dense"]
    # q, k, v, o and the mixer's in and out projections; one scan; the attention's two products
    # and its softmax; two norms on the stream; a gated MLP
    assert {op: ops[op] for op in ("attMM", "linrec", "attBMM", "softmax", "normOp", "ffMM", "ffAct")} == {
        "attMM": 6, "linrec": 1, "attBMM": 2, "softmax": 1, "normOp": 2, "ffMM": 3, "ffAct": 1,
    }  # fmt: skip
    assert (spec["num_attention_heads"], spec["num_key_value_heads"], spec["head_dim"]) == (HEADS, KV, DH)
    assert (spec["ssm_num_heads"], spec["ssm_head_dim"], spec["ssm_n_groups"], spec["ssm_state_size"], spec["ssm_inner_size"]) == (MH, P, G, N, DI)


@pytest.mark.parametrize("model_type", ["falcon_h1", "bamba"])
def test_priced_within_tolerance_at_every_measured_point_but_tp(model_type):
    """transformers' default configs: every kind within the tolerance at every point the census
    measured it at but the tp ranks: there the census keeps the Mamba2 mixer whole (the configs
    name its heads by fields census/across.yaml does not divide) and the records divide it, so
    they price the rank below what it keeps (docs/census.md, Known limits)."""
    from transformers import CONFIG_MAPPING

    from speccat.catalogue.records import points
    from speccat.flows.analysis import pricing_inputs

    config = {**CONFIG_MAPPING[model_type]().to_dict(), "model_type": model_type}
    spec = run_census(config, name=model_type, seq_length=256, across=True)
    records, grid, _, _ = pricing_inputs()
    rows = points.price_points(spec, records, grid)
    measured = points.measured_per_token(spec)
    tp = [row for row in rows if row["point"].startswith("tp") and measured.get((row["kind"], row["point"]))]
    assert any(f["attention"] in ("full_mamba2", "mamba2") for f in spec["flavours"].values()) and tp
    assert any(row["priced_per_token"] < 0.98 * measured[(row["kind"], row["point"])] for row in tp)
    rows = [row for row in rows if not row["point"].startswith("tp")]
    row, got, ratio = points.worst_ratio(spec, rows)
    assert abs(ratio - 1) <= records.tolerance, (row["kind"], row["point"], row["priced_per_token"], got)


def test_zamba2s_default_config_gives_a_kind_of_its_own_for_its_block_hybrids():
    """zamba2's default config: its `hybrid_layer_ids` give the stack, a hybrid (a shared
    transformer block before its Mamba2 layer) of kind `full_mamba2_dense_block` at each of
    them, a Mamba2 layer of kind `mamba2` everywhere else; flavours full_mamba2 and dense, never
    falcon_h1's name."""
    from transformers import CONFIG_MAPPING

    defaults = CONFIG_MAPPING["zamba2"]()
    spec = run_census({**defaults.to_dict(), "model_type": "zamba2"}, name="zamba2", seq_length=256)
    stack = ["full_mamba2_dense_block" if i in defaults.hybrid_layer_ids else "mamba2" for i in range(defaults.num_hidden_layers)]
    groups = []
    for kind in stack:
        if groups and groups[-1]["kind"] == kind:
            groups[-1]["count"] += 1
        else:
            groups.append({"kind": kind, "count": 1})
    assert spec["layers"] == groups
    assert spec["flavours"] == {"mamba2": {"attention": "mamba2", "ffn": "none"}, "full_mamba2_dense_block": {"attention": "full_mamba2", "ffn": "dense"}}
    assert spec["intermediate_size"] == defaults.intermediate_size and spec["head_dim"] == defaults.attention_head_dim


def test_a_hybrid_whose_mixers_did_not_both_run_is_refused():
    """A hybrid kind states both mixers: a probe that saw only one of them ran is refused rather
    than priced with a mixer that never ran."""
    from speccat.census.describe.layer_view import LayerView
    from speccat.census.describe.probe_checks import check_probes
    from speccat.census.measure.layer_probe import LayerProbe
    from speccat.census.structure.kernel_registry import KernelCall, shapes
    from speccat.census.structure.shapes import Shape

    ssd = KernelCall("ssd", "mamba", shapes(zxbcdt=(1, S, WIDTH), heads=(MH, P), groups=(G, N)))
    attention = KernelCall("attention", "self_attn", shapes(q=(1, HEADS, S, DH), k=(1, KV, S, DH), v=(1, KV, S, DH)))
    for ran in ([ssd], [attention]):
        view = LayerView(0, torch.nn.Module(), LayerProbe(0, kernels=ran), Shape("full_mamba2", "dense", ()), H)
        with pytest.raises(SpecError, match="only one of them ran"):
            check_probes([view])
    check_probes([LayerView(0, torch.nn.Module(), LayerProbe(0, kernels=[ssd, attention]), Shape("full_mamba2", "dense", ()), H)])
