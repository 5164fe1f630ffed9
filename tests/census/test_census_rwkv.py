"""RWKV (docs/census.md, "State-space mixers"): what the census books for one RWKV block against a
real CPU forward and backward of the same block, storage by storage; the WKV op against
transformers' CPU path; the kinds, counts and variant facts read from the block's structure;
priced against measured.

The census runs the time mixing's WKV through `speccat::wkv`, which keeps what transformers' WKV
CUDA kernel (`RwkvLinearAttention`) keeps: w = −exp(time_decay) in fp32, key, value and its
output. transformers' CPU path (`rwkv_linear_attention_cpu`, what runs without the kernel) is a
Python loop whose autograd keeps fp32 tensors per token instead.
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import assert_same_grads, priced_vs_measured, saves_and_grads, signature, tiny_model

from speccat.census import run_census

BF16, FP32 = 2, 4
H, A, I, S = 64, 48, 160, 32  # hidden, the time mixing's width (attention_hidden_size), channel mixing's width, tokens
TINY_RWKV = {
    "model_type": "rwkv", "hidden_size": H, "attention_hidden_size": A, "intermediate_size": I, "num_hidden_layers": 3,
    "vocab_size": 128, "context_length": 64, "torch_dtype": "bfloat16",
}  # fmt: skip


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY_RWKV, name="tiny-rwkv", seq_length=S)


def _run_block(model, index: int, dtype, kernel: bool, monkeypatch):
    """One real forward and backward of block `index`, its WKV through speccat's op or transformers' CPU path."""
    from transformers.models.rwkv import modeling_rwkv

    from speccat.census.kernels.wkv import speccat_rwkv_linear_attention

    if kernel:
        monkeypatch.setattr(modeling_rwkv, "rwkv_linear_attention", speccat_rwkv_linear_attention)
    torch.manual_seed(1)
    x = torch.randn(1, S, H, dtype=dtype, requires_grad=True)
    kept, grads = saves_and_grads(model, model.rwkv.blocks[index], x)
    monkeypatch.undo()
    return kept, grads


def _layer_norms(count: int, bf16) -> list:
    """What `count` LayerNorms keep: each its input, mean and rstd (fp32 on CUDA, as the census
    books them; the CPU kernel keeps them in bf16). The first norm reads the block's input, which
    the harness leaves out (the census books it: an op inside the block keeps it)."""
    return [((1, S, 1), bf16), ((1, S, 1), bf16)] * count + [((1, S, H), bf16)] * (count - 1)


@pytest.mark.parametrize("index", [0, 1])
def test_the_census_books_what_the_kernel_keeps_storage_by_storage(spec, index, monkeypatch):
    kept, _ = _run_block(tiny_model(TINY_RWKV, torch.bfloat16), index, torch.bfloat16, True, monkeypatch)
    f32, bf16 = torch.float32, torch.bfloat16
    const = ((1, 1, H), bf16)  # a token mix's (1 − μ): one per layer
    expected = [
        *_layer_norms(3 if index == 0 else 2, bf16),  # block 0 normalises its input first (pre_ln), then ln1 and ln2
        # time mixing: the norm's output (kept by the mixes' products), its token-shifted copy,
        # three (1 − μ), the key, value and receptance projections' inputs (the mixes, 2-D);
        # the receptance's sigmoid output; the output projection's input (receptance × WKV, 2-D)
        ((1, S, H), bf16), ((1, S, H), bf16), const, const, const, ((S, H), bf16), ((S, H), bf16), ((S, H), bf16),
        ((1, S, A), bf16), ((S, A), bf16),
        # the WKV kernel: w = −exp(time_decay) in fp32, key and value (the projections' outputs), its output
        ((A,), f32), ((1, S, A), bf16), ((1, S, A), bf16), ((1, S, A), bf16),
        # channel mixing: the norm's output, its shifted copy, two (1 − μ), the key and receptance
        # projections' inputs; relu's output (square keeps it too), the value projection's input
        # (the square); the receptance's sigmoid output and the value projection's output (their product keeps both)
        ((1, S, H), bf16), ((1, S, H), bf16), const, const, ((S, H), bf16), ((S, H), bf16),
        ((1, S, I), bf16), ((S, I), bf16), ((1, S, H), bf16), ((1, S, H), bf16),
    ]  # fmt: skip
    real = signature(kept.values())
    assert sorted(((shape, dtype) for shape, dtype, _ in real), key=str) == sorted(expected, key=str)
    kind = spec["layers"][0 if index == 0 else 1]["kind"]
    booked = spec["measured"][kind]["bytes_per_token"]
    norms = 3 if index == 0 else 2
    # the census books LayerNorm statistics at their CUDA width (fp32), the CPU run keeps bf16
    cuda_stats = norms * 2 * S * (FP32 - BF16)
    block_input = S * BF16 * H  # the first norm's input, left out by the harness
    assert sum(booked.values()) * S == sum(n for _, _, n in real) + cuda_stats + block_input
    assert booked["attMM"] * S == S * BF16 * (5 * H + 2 * A) + 3 * BF16 * H
    assert booked["linrec"] * S == S * 3 * BF16 * A + FP32 * A
    assert booked["ffMM"] * S == S * BF16 * (6 * H + I) + 2 * BF16 * H
    assert booked["ffAct"] == BF16 * I  # relu's output
    assert booked["normOp"] == norms * (BF16 * H + 2 * FP32)


def test_the_wkv_op_computes_what_transformers_cpu_path_computes(monkeypatch):
    """fp32 on CPU: a block through speccat::wkv gives the gradients transformers' CPU path gives."""
    model = tiny_model(TINY_RWKV, torch.float32)
    _, ours = _run_block(model, 1, torch.float32, True, monkeypatch)
    model.zero_grad()
    _, reference = _run_block(model, 1, torch.float32, False, monkeypatch)
    assert_same_grads(ours, reference)


def _wkv_by_sums(time_decay, time_first, key, value):
    """WKV written as its definition, sums over the past (no recurrence, no running maximum):
    wkv_t = (Σ_{i<t} e^{−(t−1−i)e^{decay} + k_i} v_i + e^{u + k_t} v_t) / (Σ_{i<t} e^{−(t−1−i)e^{decay} + k_i} + e^{u + k_t})."""
    s = key.shape[1]
    t, i = torch.arange(s).view(s, 1), torch.arange(s).view(1, s)
    lag = (t - 1 - i).clamp(min=0).unsqueeze(-1)  # (t, i, 1)
    weights = torch.exp(-lag * torch.exp(time_decay) + key.unsqueeze(1))  # (b, t, i, c)
    weights = torch.where((i < t).unsqueeze(-1), weights, torch.zeros_like(weights))
    now = torch.exp(time_first + key)
    return ((weights * value.unsqueeze(1)).sum(2) + now * value) / (weights.sum(2) + now)


def test_the_wkv_op_against_its_definition_and_transformers_cpu_path():
    """The op's output and its gradients for time_decay, time_first, key and value on random fp64
    inputs (wide keys: the running maximum matters), against WKV written as sums (fp64 exact) and
    against transformers' rwkv_linear_attention_cpu (which casts each key to fp32: fp32 close)."""
    from transformers.models.rwkv.modeling_rwkv import rwkv_linear_attention_cpu

    from speccat.census.kernels.wkv import speccat_rwkv_linear_attention

    generator = torch.Generator().manual_seed(3)
    leaves = [
        torch.randn(5, generator=generator, dtype=torch.float64),
        torch.randn(5, generator=generator, dtype=torch.float64),
        8 * torch.randn(2, 9, 5, generator=generator, dtype=torch.float64),
        torch.randn(2, 9, 5, generator=generator, dtype=torch.float64),
    ]
    grad = torch.randn(2, 9, 5, generator=generator, dtype=torch.float64)

    def run(function):
        inputs = [t.clone().requires_grad_(True) for t in leaves]
        out = function(*inputs)
        out = out[0] if isinstance(out, tuple) else out
        return (out, *torch.autograd.grad(out, inputs, grad))

    ours = run(speccat_rwkv_linear_attention)
    for mine, exact in zip(ours, run(_wkv_by_sums)):
        torch.testing.assert_close(mine, exact, rtol=1e-10, atol=1e-12)
    for mine, reference in zip(ours, run(rwkv_linear_attention_cpu)):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)


def test_the_cpu_path_keeps_per_token_fp32_tensors_the_kernel_does_not(monkeypatch):
    """How the kernel's saved set relates to transformers' CPU path (bf16, real tensors): both keep
    everything outside the WKV alike; inside it the CPU loop keeps fp32 copies of each token's key
    and its running states and exponentials (one (1, A) fp32 tensor after another), where the
    kernel keeps key, value and output once and w."""
    kernel, _ = _run_block(tiny_model(TINY_RWKV, torch.bfloat16), 1, torch.bfloat16, True, monkeypatch)
    loop, _ = _run_block(tiny_model(TINY_RWKV, torch.bfloat16), 1, torch.bfloat16, False, monkeypatch)
    kernel, loop = signature(kernel.values()), signature(loop.values())
    outside = [entry for entry in kernel if entry[0] not in ((A,), (1, S, A))]
    assert all(entry in loop for entry in outside)
    assert sum(1 for shape, dtype, _ in loop if shape == (1, A) and dtype == torch.float32) >= 4 * S
    assert sum(n for _, _, n in loop) > sum(n for _, _, n in kernel)


def test_rwkv_gives_its_kinds_counts_and_structure(spec):
    """Block 0 holds a norm more (pre_ln) than the others: two kinds. Each: the time mixing (rwkv:
    key, value, receptance and output projections around one WKV), a channel mixing read as a
    dense MLP (key up, relu², value down) with a token shift and a sigmoid output gate (its
    receptance, no part of the MLP's width or matmuls)."""
    assert spec["layers"] == [{"kind": "rwkv_dense", "count": 1}, {"kind": "rwkv_dense_2", "count": 2}]
    assert spec["flavours"] == {kind: {"attention": "rwkv", "ffn": "dense"} for kind in ("rwkv_dense", "rwkv_dense_2")}
    assert (spec["hidden_size"], spec["wkv_size"], spec["intermediate_size"], spec["num_attention_heads"]) == (H, A, I, 1)
    for kind, norms in (("rwkv_dense", 3), ("rwkv_dense_2", 2)):
        ops = spec["ops"][kind]
        assert {op: ops[op] for op in ("attMM", "attBMM", "softmax", "linrec", "ffMM", "ffAct", "normOp")} == {
            "attMM": 4, "attBMM": 0, "softmax": 0, "linrec": 1, "ffMM": 2, "ffAct": 1, "normOp": norms,
        }  # fmt: skip
        variants = spec["variants"][kind]
        assert {name: variants[name] for name in ("token_mixes", "ff_token_mixes", "ff_out_gate", "act_saved", "act_output_read")} == {
            "token_mixes": 3, "ff_token_mixes": 2, "ff_out_gate": True, "act_saved": 1, "act_output_read": False,
        }  # fmt: skip
        assert spec["measured"][kind]["attention_impl"] == "speccat::wkv"
    params = spec["params"]["kinds"]["rwkv_dense_2"]
    # time mixing: four projections, time_decay, time_first and three μ; channel mixing: key, value, receptance and two μ
    assert params["attention"] == 3 * H * A + A * H + 2 * A + 3 * H
    assert params["ffn_dense"] == 2 * H * I + H * H + 2 * H


def test_a_model_without_rwkv_states_no_token_mixes_or_gate():
    tiny_llama = {
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 128, "torch_dtype": "bfloat16",
    }  # fmt: skip
    variants = run_census(tiny_llama, name="tiny-llama", seq_length=S)["variants"]["decoder"]
    assert (variants["token_mixes"], variants["ff_token_mixes"], variants["ff_out_gate"]) == (0, 0, False)


@pytest.mark.parametrize("seq", [S, 4096])
def test_rwkv_stacks_are_priced_as_measured(seq):
    spec = run_census({**TINY_RWKV, "context_length": seq}, name="tiny-rwkv", seq_length=seq)
    for kind, (priced, measured) in priced_vs_measured(spec, seq).items():
        assert abs(priced / measured - 1) <= 0.01, (kind, priced, measured)
