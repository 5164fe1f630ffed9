"""Mamba2 mixers and hybrid stacks (docs/census.md, "State-space mixers"): what the census books for
one Mamba2 layer against a real CPU forward and backward of the same layer, storage by storage;
the relation to transformers' slow path; nemotron_h's kinds and counts read from its config by
hand; every kind of the hybrids priced within 2% of what the census measured.

The census runs the mixer through `speccat::mamba_split_conv1d_scan`, which keeps what mamba_ssm's
fused `mamba_split_conv1d_scan_combined` keeps (zxbcdt, the scan's output out_x, the gated norm's
rstd); transformers' slow path (taken when mamba_ssm is not installed) keeps other tensors.
"""

from __future__ import annotations

import pytest
import torch
from conftest import load_shipped
from support.layer_runs import assert_same_grads, priced_vs_measured, saves_and_grads, signature, tiny_model

from speccat.census import run_census

BF16, FP32 = 2, 4
H, HEADS, P, N, G, W, S = 32, 4, 16, 8, 2, 4, 32  # hidden, ssm heads, head dim, state, groups, conv width, tokens
DIM = HEADS * P
TINY_MAMBA2 = {
    "model_type": "mamba2", "hidden_size": H, "num_heads": HEADS, "head_dim": P, "expand": 2, "state_size": N,
    "n_groups": G, "conv_kernel": W, "num_hidden_layers": 2, "vocab_size": 128, "chunk_size": 8, "torch_dtype": "bfloat16",
}  # fmt: skip
WIDTH = 2 * DIM + 2 * G * N + HEADS  # the in-projection's output: z, x, B, C, dt
NANO = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"


def _model(dtype):
    return tiny_model(TINY_MAMBA2, dtype)


def _run_layer(model, dtype, fused: bool, monkeypatch):
    """One real forward and backward of layer 0: (the storages it saved, the gradients)."""
    from transformers.models.mamba2 import modeling_mamba2

    from speccat.census.kernels.ssd import speccat_mamba_split_conv1d_scan_combined

    kernel = speccat_mamba_split_conv1d_scan_combined if fused else (lambda *a, **k: None)  # None: transformers' slow path
    monkeypatch.setattr(modeling_mamba2, "mamba2_split_conv1d_scan_combined", kernel)
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=dtype, requires_grad=True)
    kept, grads = saves_and_grads(model, model.backbone.layers[0], x)
    monkeypatch.undo()
    return kept, grads


def test_the_census_books_what_the_kernel_keeps_storage_by_storage(monkeypatch):
    spec = run_census(TINY_MAMBA2, name="tiny-mamba2", seq_length=S)
    kept, _ = _run_layer(_model(torch.bfloat16), torch.bfloat16, True, monkeypatch)
    f32, bf16 = torch.float32, torch.bfloat16
    expected = [
        # the block's RMSNorm: fp32 upcast input, fp32 rstd, the bf16 normalised input
        ((1, S, H), f32), ((1, S, 1), f32), ((1, S, H), bf16),
        # in_proj's input (the norm's output, 2-D); exp(A_log) in fp32 (one per head)
        ((S, H), bf16), ((HEADS,), f32),
        # the fused kernel: zxbcdt (in_proj's whole output), the scan's output out_x (heads, head
        # dim), A (fp32), the gated norm's fp32 rstd (one per group and token). D, dt's bias, the
        # conv, norm and out weights are parameters.
        ((1, S, WIDTH), bf16), ((1, S, HEADS, P), bf16), ((HEADS,), f32), ((G, S), f32),
    ]  # fmt: skip
    real = signature(kept.values())
    assert sorted(((shape, dtype) for shape, dtype, _ in real), key=str) == sorted(expected, key=str)
    booked = spec["measured"]["mamba2"]["bytes_per_token"]
    assert sum(booked.values()) * S == sum(n for _, _, n in real)
    assert booked["attMM"] * S == S * BF16 * H + FP32 * HEADS
    assert booked["linrec"] * S == S * (BF16 * WIDTH + BF16 * DIM + FP32 * G) + FP32 * HEADS


def test_the_kernel_op_computes_what_the_slow_path_computes(monkeypatch):
    """fp32 on CPU: speccat::mamba_split_conv1d_scan's output and every gradient equal transformers' slow path."""
    model = _model(torch.float32)
    _, fused = _run_layer(model, torch.float32, True, monkeypatch)
    model.zero_grad()
    _, slow = _run_layer(model, torch.float32, False, monkeypatch)
    assert_same_grads(fused, slow)


def test_the_slow_path_keeps_the_recomputed_tensors_the_kernel_does_not(monkeypatch):
    """How the kernel's saved set relates to transformers' slow path (bf16, real tensors).

    Kept by both: the block norm's tensors, in_proj's input, exp(A_log), and the in-projection's
    output zxbcdt (the slow path's conv input and dt are views of it).
    Kept by the kernel only: out_x as a tensor of its own and the norm's rstd per group (the slow
    path keeps the same values inside larger fp32 tensors).
    Kept by the slow path only, all recomputed by the kernel in backward: the conv's output and
    its SiLU, dt's softplus and clamp, the fp32 x, B and C with B and C repeated to every head,
    the chunked scan's per-chunk decays, segment sums, intra-chunk states (fp32, chunk × chunk
    per head), the gated norm's fp32 upcasts and gate. Those outweigh what the kernel keeps.
    """
    kernel, _ = _run_layer(_model(torch.bfloat16), torch.bfloat16, True, monkeypatch)
    slow, _ = _run_layer(_model(torch.bfloat16), torch.bfloat16, False, monkeypatch)
    kernel, slow = signature(kernel.values()), signature(slow.values())
    pairs = lambda sig: {(shape, dtype) for shape, dtype, _ in sig}  # noqa: E731
    for both in (((1, S, H), torch.float32), ((1, S, H), torch.bfloat16), ((HEADS,), torch.float32)):
        assert both in pairs(kernel) and both in pairs(slow), both
    # zxbcdt's storage: in the slow path its split views (the conv's input, dt) keep it
    assert any(nbytes == BF16 * S * WIDTH for _, _, nbytes in slow)
    # B and C repeated to every head, in fp32: (1, S, heads, state) each
    assert sum(1 for shape, dtype, _ in slow if dtype == torch.float32 and shape[-2:] == (HEADS, N)) >= 2
    assert sum(n for _, _, n in slow) > 2 * sum(n for _, _, n in kernel)


def test_nemotron_h_nano_gives_the_kinds_and_counts_its_config_states():
    """NVIDIA-Nemotron-3-Nano-30B-A3B: hybrid_override_pattern
    MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME (52 blocks): 23 M (Mamba2), 23 E (MoE),
    6 * (attention). Mamba: 64 heads of 64 (inner 4096), 8 groups, state 128, conv 4. Attention:
    32 heads, 2 kv heads, head dim 128. MoE: 128 experts, top 6, width 1856, a shared expert of
    3712; relu² experts (up, down). Hidden 2688, vocab 131072."""
    config = load_shipped(NANO)
    pattern = config["hybrid_override_pattern"]
    spec = run_census(config, name="nemotron-nano", seq_length=4096)
    letter = {"mamba2": "M", "moe": "E", "full": "*"}
    assert "".join(letter[g["kind"]] * g["count"] for g in spec["layers"]) == pattern
    assert (pattern.count("M"), pattern.count("E"), pattern.count("*")) == (23, 23, 6)
    assert spec["flavours"] == {
        "mamba2": {"attention": "mamba2", "ffn": "none"},
        "moe": {"attention": "none", "ffn": "moe"},
        "full": {"attention": "full", "ffn": "none"},
    }
    assert (spec["hidden_size"], spec["vocab_size"], spec["num_hidden_layers"]) == (2688, 131072, 52)
    assert (spec["ssm_num_heads"], spec["ssm_head_dim"], spec["ssm_inner_size"], spec["ssm_n_groups"], spec["ssm_state_size"], spec["ssm_conv_kernel"]) == (
        64, 64, 4096, 8, 128, 4,
    )  # fmt: skip
    assert (spec["num_attention_heads"], spec["num_key_value_heads"], spec["head_dim"]) == (32, 2, 128)
    assert (spec["num_experts"], spec["num_experts_per_tok"], spec["moe_intermediate_size"], spec["shared_expert_intermediate_size"]) == (128, 6, 1856, 3712)
    impls = {kind: m["attention_impl"] for kind, m in spec["measured"].items()}
    assert impls == {"mamba2": "speccat::mamba_split_conv1d_scan", "moe": "none", "full": "speccat::flash_attention"}
    ops = spec["ops"]
    # Mamba2: in and out projections, one norm, one scan; MoE: up and down per expert, relu²;
    # attention: q, k, v, o, the kernel's two products and its log-sum-exp; one norm per block
    assert {op: ops["mamba2"][op] for op in ("attMM", "normOp", "linrec", "ffMM", "attBMM")} == {"attMM": 2, "normOp": 1, "linrec": 1, "ffMM": 0, "attBMM": 0}
    assert {op: ops["moe"][op] for op in ("attMM", "normOp", "linrec", "ffMM", "ffAct")} == {"attMM": 0, "normOp": 1, "linrec": 0, "ffMM": 2, "ffAct": 1}
    assert {op: ops["full"][op] for op in ("attMM", "attBMM", "softmax", "ffMM", "normOp")} == {"attMM": 4, "attBMM": 2, "softmax": 1, "ffMM": 0, "normOp": 1}
    for kind, (priced, measured) in priced_vs_measured(spec, 4096).items():
        assert abs(priced / measured - 1) <= 0.02, (kind, priced, measured)


@pytest.mark.parametrize("model_type", ["mamba2", "bamba"])
def test_hybrid_defaults_are_priced_as_measured(model_type):
    """transformers' default configs of Mamba2 stacks: every kind within 2% of the measurement."""
    from transformers import CONFIG_MAPPING

    config = {**CONFIG_MAPPING[model_type]().to_dict(), "model_type": model_type}
    spec = run_census(config, name=model_type, seq_length=4096)
    assert any(f["attention"] == "mamba2" for f in spec["flavours"].values())
    for kind, (priced, measured) in priced_vs_measured(spec, 4096).items():
        assert abs(priced / measured - 1) <= 0.02, (kind, priced, measured)
