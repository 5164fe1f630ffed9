"""speccat's custom kernels are correct on real tensors: each is checked against an independent
implementation (transformers' own eager attention and torch gated delta rule), forward and
backward, and under fake tensors they keep exactly what the production kernels keep."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from speccat.census.kernels import causal_conv1d, delta_rule, flash_attention, kda

torch_ = pytest.importorskip("transformers")
from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward as gemma2_eager  # noqa: E402
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward as gpt_oss_eager  # noqa: E402
from transformers.models.kimi_linear.modeling_kimi_linear import chunk_kimi_delta_attention  # noqa: E402
from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule  # noqa: E402


def _additive_mask(s: int, t: int, window: int) -> torch.Tensor:
    """A (1, 1, s, t) additive mask written out by loops: causal, and the last `window` keys if window > 0."""
    mask = torch.full((s, t), float("-inf"))
    for i in range(s):
        row = i + (t - s)
        for j in range(t):
            if j <= row and (window <= 0 or row - j < window):
                mask[i, j] = 0.0
    return mask.view(1, 1, s, t)


def _qkv(b=2, heads=4, kv_heads=2, s=7, d=8, dv=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, heads, s, d, generator=gen, dtype=torch.float64)
    k = torch.randn(b, kv_heads, s, d, generator=gen, dtype=torch.float64)
    v = torch.randn(b, kv_heads, s, dv, generator=gen, dtype=torch.float64)
    return q, k, v


def _grads(fn, *tensors):
    leaves = [t.clone().requires_grad_() for t in tensors]
    out = fn(*leaves)
    weight = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)  # a fixed upstream gradient
    (out * weight).sum().backward()
    return out.detach(), [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("window,softcap", [(0, 0.0), (3, 0.0), (0, 2.5)])
def test_flash_attention_matches_gemma2_eager(window, softcap):
    q, k, v = _qkv()
    module = SimpleNamespace(num_key_value_groups=2, training=False, head_dim=8)
    scale = 0.3

    def ours(q, k, v):
        return flash_attention.flash_attention(q, k, v, None, None, scale, True, window, softcap, 0.0, 0)[0]

    def reference(q, k, v):
        return gemma2_eager(module, q, k, v, _additive_mask(7, 7, window), scaling=scale, softcap=softcap or None)[0]

    out, grads = _grads(ours, q, k, v)
    ref_out, ref_grads = _grads(reference, q, k, v)
    # gemma2's eager softmax runs in fp32 even on fp64 inputs, hence fp32-level tolerances.
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    for ours_grad, ref_grad in zip(grads, ref_grads):
        torch.testing.assert_close(ours_grad, ref_grad, rtol=1e-5, atol=1e-6)


def test_flash_attention_sinks_match_gpt_oss_eager():
    q, k, v = _qkv(seed=1)
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64)

    def ours(q, k, v, sinks):
        return flash_attention.flash_attention(q, k, v, sinks, None, 0.4, True, 0, 0.0, 0.0, 0)[0]

    def reference(q, k, v, sinks):
        module = SimpleNamespace(num_key_value_groups=2, training=False, sinks=sinks)
        return gpt_oss_eager(module, q, k, v, _additive_mask(7, 7, 0), scaling=0.4)[0]

    out, grads = _grads(ours, q, k, v, sinks)
    ref_out, ref_grads = _grads(reference, q, k, v, sinks)
    torch.testing.assert_close(out, ref_out)
    for ours_grad, ref_grad in zip(grads, ref_grads):
        torch.testing.assert_close(ours_grad, ref_grad)


@pytest.mark.parametrize("bias_shape,window", [((2, 4, 7, 7), 0), ((1, 4, 7, 7), 3), ((2, 1, 7, 7), 0)])
def test_flash_attention_score_bias_matches_sdpa_with_a_float_mask(bias_shape, window):
    """An additive score bias as torch SDPA takes it in a float mask (transformers'
    create_position_bias_mask: the bias where a key is allowed, -inf elsewhere): the same output
    and the same gradients, the bias's included (summed over the dims it broadcasts along)."""
    q, k, v = _qkv(seed=5)
    bias = torch.randn(bias_shape, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    allowed = _additive_mask(7, 7, window) == 0

    def ours(q, k, v, bias):
        return flash_attention.flash_attention(q, k, v, None, None, 0.3, True, window, 0.0, 0.0, 0, bias)[0]

    def reference(q, k, v, bias):
        mask = torch.where(allowed, bias, float("-inf"))
        out = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=mask, scale=0.3)
        return out.transpose(1, 2)

    out, grads = _grads(ours, q, k, v, bias)
    ref_out, ref_grads = _grads(reference, q, k, v, bias)
    torch.testing.assert_close(out, ref_out)
    for ours_grad, ref_grad in zip(grads, ref_grads):
        torch.testing.assert_close(ours_grad, ref_grad)
    assert grads[3].abs().sum() > 0


def test_flash_attention_log_sum_exp_is_the_row_normaliser():
    q, k, v = _qkv(seed=2)
    _, lse = flash_attention.flash_attention(q, k, v, None, None, 1.0, True, 0, 0.0, 0.0, 0)
    # Row i of head h (kv head h // 2) sees keys 0..i: lse = log Σ_j exp(q_i·k_j).
    i, h = 4, 3
    expected = torch.logsumexp(q[0, h, i] @ k[0, h // 2, : i + 1].T, dim=0)
    torch.testing.assert_close(lse[0, h, i], expected)


def test_flash_attention_dropout_is_reproducible_from_its_seed():
    q, k, v = _qkv(seed=3)
    first = flash_attention.flash_attention(q, k, v, None, None, 0.5, True, 0, 0.0, 0.5, 1234)[0]
    again = flash_attention.flash_attention(q, k, v, None, None, 0.5, True, 0, 0.0, 0.5, 1234)[0]
    other = flash_attention.flash_attention(q, k, v, None, None, 0.5, True, 0, 0.0, 0.5, 99)[0]
    torch.testing.assert_close(first, again)
    assert not torch.allclose(first, other)
    # The backward regenerates the same mask: compare with finite differences on one element.
    assert torch.autograd.gradcheck(
        lambda q: flash_attention.flash_attention(q, k, v, None, None, 0.5, True, 0, 0.0, 0.5, 1234)[0],
        (q.clone().requires_grad_(),),
    )


def test_flash_attention_indices_restrict_keys():
    q, k, v = _qkv(b=1, s=5, seed=4)
    # Query row i chooses keys {0, i}: the output is a softmax over just those two keys.
    indices = torch.tensor([[[0, 0], [0, 1], [0, 2], [0, 3], [0, 4]]])
    out, _ = flash_attention.flash_attention(q, k, v, None, indices, 1.0, True, 0, 0.0, 0.0, 0)
    i, h = 3, 1
    logits = torch.stack([q[0, h, i] @ k[0, h // 2, 0], q[0, h, i] @ k[0, h // 2, i]])
    weights = torch.softmax(logits, dim=0)
    expected = weights[0] * v[0, h // 2, 0] + weights[1] * v[0, h // 2, i]
    torch.testing.assert_close(out[0, i, h], expected)


def _delta_inputs(b=1, s=70, kv_heads=2, heads=4, dk=8, dv=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, s, kv_heads, dk, generator=gen, dtype=torch.float64)
    k = torch.randn(b, s, kv_heads, dk, generator=gen, dtype=torch.float64)
    v = torch.randn(b, s, heads, dv, generator=gen, dtype=torch.float64)
    g = -torch.rand(b, s, heads, generator=gen, dtype=torch.float64) * 0.5
    beta = torch.rand(b, s, heads, generator=gen, dtype=torch.float64)
    return q, k, v, g, beta


def test_delta_rule_matches_transformers_torch_implementation():
    # 70 tokens: one full chunk of 64 and a partial one, so chunk restarts are exercised.
    inputs = _delta_inputs()
    scale = 8**-0.5

    def ours(q, k, v, g, beta):
        return delta_rule.chunk_gated_delta_rule(q, k, v, g, beta, scale, True)[0]

    def reference(q, k, v, g, beta):
        return torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True)[0]

    out, grads = _grads(ours, *inputs)
    ref_out, ref_grads = _grads(reference, *inputs)
    # The reference computes in fp32 whatever the input dtype, hence fp32-level tolerances.
    torch.testing.assert_close(out, ref_out.to(out.dtype), rtol=1e-5, atol=1e-5)
    for name, ours_grad, ref_grad in zip("q k v g beta".split(), grads, ref_grads):
        torch.testing.assert_close(ours_grad, ref_grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"d{name}: {m}")


def test_delta_rule_wy_matrix_inverts_the_chunk_system():
    q, k, v, g, beta = _delta_inputs(s=64)
    _, _, kn, _, _, g_cum, wy = delta_rule.chunk_gated_delta_rule(q, k, v, g, beta, 1.0, True)
    # Head 3 reads kv head 1. M = I + strictly-lower(β_i k_i·k_j e^{g_i−g_j}); A·M must be I.
    h, kh = 3, 1
    kc = kn[0, :, kh]
    gc = g_cum[0, :, h]
    m = torch.eye(64, dtype=torch.float64)
    for i in range(64):
        for j in range(i):
            m[i, j] = beta[0, i, h] * (kc[i] @ kc[j]) * torch.exp(gc[i] - gc[j])
    torch.testing.assert_close(wy[0, :, h] @ m, torch.eye(64, dtype=torch.float64))


def _kda_inputs(b=2, s=70, heads=3, dk=8, seed=0):
    """Kimi delta attention's inputs: as many key as value heads, and a gate per key channel."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, s, heads, dk, generator=gen, dtype=torch.float64) for _ in range(3))
    g = -torch.rand(b, s, heads, dk, generator=gen, dtype=torch.float64) * 0.5
    beta = torch.rand(b, s, heads, generator=gen, dtype=torch.float64)
    return q, k, v, g, beta


def test_kda_matches_transformers_torch_implementation():
    """speccat::chunk_kda's output and its gradients for q, k, v, the per-channel gate and beta
    equal transformers' torch `chunk_kimi_delta_attention` (CPU: no kernel hub), over a full
    chunk and a partial one."""
    inputs = _kda_inputs()
    out, grads = _grads(lambda *t: kda.chunk_kda(*t, 8**-0.5, True)[0], *inputs)
    ref_out, ref_grads = _grads(lambda q, k, v, g, beta: chunk_kimi_delta_attention(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True)[0], *inputs)
    torch.testing.assert_close(out, ref_out.to(out.dtype), rtol=1e-5, atol=1e-5)
    for name, ours_grad, ref_grad in zip("q k v g beta".split(), grads, ref_grads):
        torch.testing.assert_close(ours_grad, ref_grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"d{name}: {m}")


def test_kda_keeps_fla_s_chunk_matrices():
    """Aqk holds q_i·(k_j ⊙ e^{g_i − g_j})·scale for j ≤ i within a chunk, Akk inverts
    I + strictly-lower(β_i k_i·(k_j ⊙ e^{g_i − g_j})): fla's chunk_kda's two matrices, per value
    head and token, with the gate per key channel; the cumulative gate restarts every 64."""
    q, k, v, g, beta = _kda_inputs(b=1, s=64, heads=2)
    _, qn, kn, _, _, g_cum, aqk, akk = kda.chunk_kda(q, k, v, g, beta, 0.5, True)
    torch.testing.assert_close(g_cum, g.cumsum(1))
    h = 1
    m, scores = torch.eye(64, dtype=torch.float64), torch.zeros(64, 64, dtype=torch.float64)
    for i in range(64):
        for j in range(i + 1):
            decayed = kn[0, j, h] * torch.exp(g_cum[0, i, h] - g_cum[0, j, h])
            scores[i, j] = 0.5 * qn[0, i, h] @ decayed
            if j < i:
                m[i, j] = beta[0, i, h] * (kn[0, i, h] @ decayed)
    torch.testing.assert_close(aqk[0, :, h], scores)
    torch.testing.assert_close(akk[0, :, h] @ m, torch.eye(64, dtype=torch.float64))


def test_fake_kda_keeps_what_fla_chunk_kda_keeps():
    """Under fake tensors: normalised q and k (bf16), two fp32 inverse norms per key head, v, the
    fp32 cumulative gate and the gate as given (per key channel), beta, Aqk and Akk (bf16, 64 a
    value head and token), nothing of the chunk states."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    kept = []
    with FakeTensorMode():
        q, k, v = (torch.empty(1, 16, 2, 4, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        g = torch.empty(1, 16, 2, 4, dtype=torch.float32, requires_grad=True)
        beta = torch.empty(1, 16, 2, dtype=torch.bfloat16, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
            out = kda.chunk_kda(q, k, v, g, beta, 0.5, True)[0]
        out.sum().backward()
        assert g.grad.shape == g.shape and q.grad.shape == q.shape
    f32, bf16 = torch.float32, torch.bfloat16
    assert [(tuple(t.shape), t.dtype) for t in kept] == [
        ((1, 16, 2, 4), bf16), ((1, 16, 2, 4), bf16), ((1, 16, 2), f32), ((1, 16, 2), f32), ((1, 16, 2, 4), bf16),
        ((1, 16, 2, 4), f32), ((1, 16, 2, 4), f32), ((1, 16, 2), bf16), ((1, 16, 2, 64), bf16), ((1, 16, 2, 64), bf16),
    ]  # fmt: skip


def test_fake_kernels_keep_what_flash_kernels_keep():
    from torch._subclasses.fake_tensor import FakeTensorMode

    kept = []
    with FakeTensorMode():
        q = torch.empty(1, 8, 16, 4, dtype=torch.bfloat16, requires_grad=True)
        k = torch.empty(1, 2, 16, 4, dtype=torch.bfloat16, requires_grad=True)
        v = torch.empty(1, 2, 16, 4, dtype=torch.bfloat16, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
            out, _ = flash_attention.flash_attention(q, k, v, None, None, 0.5, True, 0, 0.0, 0.0, 0)
        out.sum().backward()
        assert q.grad.shape == q.shape and k.grad.shape == k.shape
    # q, k, v as given (2 kv heads, not 8), the output and the fp32 lse: nothing s×s.
    assert [tuple(t.shape) for t in kept] == [(1, 8, 16, 4), (1, 2, 16, 4), (1, 2, 16, 4), (1, 16, 8, 4), (1, 8, 16)]
    assert [t.dtype for t in kept] == [torch.bfloat16] * 4 + [torch.float32]



def test_fake_kernel_keeps_a_score_bias_as_sdpa_s_memory_efficient_kernel_does():
    """With a bias, the op keeps what ScaledDotProductEfficientAttentionBackward0 keeps: q, k, v,
    the bias as given, the output and the fp32 log-sum-exp; the bias gets a gradient of its shape."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    kept = []
    with FakeTensorMode():
        q = torch.empty(1, 8, 16, 4, dtype=torch.bfloat16, requires_grad=True)
        k = torch.empty(1, 2, 16, 4, dtype=torch.bfloat16, requires_grad=True)
        v = torch.empty(1, 2, 16, 4, dtype=torch.bfloat16, requires_grad=True)
        bias = torch.empty(1, 8, 16, 16, dtype=torch.bfloat16, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
            out, _ = flash_attention.flash_attention(q, k, v, None, None, 0.5, True, 0, 0.0, 0.0, 0, bias)
        out.sum().backward()
        assert bias.grad.shape == bias.shape and bias.grad.dtype == torch.bfloat16
    shapes = [tuple(t.shape) for t in kept]
    assert shapes == [(1, 8, 16, 4), (1, 2, 16, 4), (1, 2, 16, 4), (1, 16, 8, 4), (1, 8, 16), (1, 8, 16, 16)]
    assert [t.dtype for t in kept] == [torch.bfloat16] * 4 + [torch.float32, torch.bfloat16]

def test_causal_conv1d_matches_transformers_and_keeps_only_its_input():
    """speccat::causal_conv1d computes what transformers' causal_conv1d_fn computes (a depthwise
    causal conv, then SiLU) with its gradients, and its autograd node keeps x and the weights
    only: no conv or SiLU output."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 11, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        out = causal_conv1d.causal_conv1d(x, weight, None, True)
    x_ref, w_ref = x.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    expected = torch.nn.functional.silu(torch.nn.functional.conv1d(x_ref, w_ref.unsqueeze(1), padding=3, groups=6)[..., :11])
    torch.testing.assert_close(out, expected)
    grad = torch.randn_like(out)
    torch.testing.assert_close(torch.autograd.grad(out, (x, weight), grad), torch.autograd.grad(expected, (x_ref, w_ref), grad))
    assert {t.untyped_storage().data_ptr() for t in kept} == {x.untyped_storage().data_ptr(), weight.untyped_storage().data_ptr()}


def test_causal_conv1d_takes_fp32_weights_on_half_inputs():
    """bailing_hybrid builds its conv in fp32 and runs it on bf16 activations: the op computes in
    fp32 both ways and hands each gradient back in its input's dtype, as the fp32 reference's."""
    torch.manual_seed(0)
    x = torch.randn(1, 6, 9, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(6, 4, dtype=torch.float32, requires_grad=True)
    out = causal_conv1d.causal_conv1d(x, weight, None, True)
    grad = torch.randn(out.shape, dtype=torch.float32)
    dx, dw = torch.autograd.grad(out, (x, weight), grad.to(out.dtype))
    assert (out.dtype, dx.dtype, dw.dtype) == (torch.bfloat16, torch.bfloat16, torch.float32)
    x_ref, w_ref = x.detach().float().requires_grad_(), weight.detach().clone().requires_grad_()
    expected = torch.nn.functional.silu(torch.nn.functional.conv1d(x_ref, w_ref.unsqueeze(1), padding=3, groups=6)[..., :9])
    ref_dx, ref_dw = torch.autograd.grad(expected, (x_ref, w_ref), grad.to(torch.bfloat16).float())
    torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(dx.float(), ref_dx, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(dw, ref_dw, rtol=1e-4, atol=1e-4)
