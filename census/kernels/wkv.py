"""RWKV's WKV recurrence as a torch.library custom op keeping what transformers' CUDA kernel
keeps (docs/census.md, "State-space mixers"), and the function the census puts in place of
transformers' `rwkv_linear_attention` while a layer runs.

On a GPU, transformers' RWKV time mixing calls its WKV CUDA kernel (the `kernels-community/rwkv`
kernel, built from transformers' `kernels/rwkv/wkv_cuda*.cu`) through the autograd function
`RwkvLinearAttention`. Its forward computes w = −exp(time_decay) in fp32, runs the kernel
(`forward_bf16(w fp32, u, k, v, y)`: u = time_first, k and v in the compute dtype, bf16 or
fp32; fp16 is cast to fp32 first) and keeps w, time_first, key, value (the projections' own
outputs: `.contiguous()` copies nothing) and the output y (returned as is). Its backward
recomputes the recurrence from them; nothing per token and channel beyond k, v and y is kept.
On a CPU transformers runs `rwkv_linear_attention_cpu` instead, a Python loop whose autograd
keeps several fp32 tensors per token: not what training on a GPU keeps.

`speccat::wkv` keeps exactly the kernel's set. It has a fake implementation (shapes only) and
a real CPU one in fp32 whose backward recomputes the recurrence from what was kept, so the op
is correct on real tensors too (the tests compare it with transformers' CPU path).
"""

from __future__ import annotations

import re

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from speccat.census.kernels.scope import kernel_scope
from speccat.census.kernels.tensors import acc
from speccat.census.structure.kernel_registry import NAMESPACE, CallSeen, Kernel, KernelCall, Keeps, register, shapes


def _wkv(w: Tensor, u: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The WKV recurrence over k, v (b, s, c) with decay w = −exp(time_decay) and bonus u (c,), in
    their dtype, written as transformers' CPU path (numerically stable, with a running maximum):

    wkv_t = (Σ_{i<t} e^{(t−1−i)w + k_i} v_i + e^{u + k_t} v_t) / (Σ_{i<t} e^{(t−1−i)w + k_i} + e^{u + k_t})
    """
    num = torch.zeros_like(k[:, 0])
    den = torch.zeros_like(k[:, 0])
    top = torch.full_like(k[:, 0], -1e38)
    outputs = []
    for t in range(k.shape[1]):
        kt, vt = k[:, t], v[:, t]
        m = torch.maximum(top, kt + u)
        e1, e2 = torch.exp(top - m), torch.exp(kt + u - m)
        outputs.append((e1 * num + e2 * vt) / (e1 * den + e2))
        m = torch.maximum(top + w, kt)
        e1, e2 = torch.exp(top + w - m), torch.exp(kt - m)
        num, den, top = e1 * num + e2 * vt, e1 * den + e2, m
    return torch.stack(outputs, dim=1)


@torch.library.custom_op(f"{NAMESPACE}::wkv", mutates_args=())
def wkv(time_decay: Tensor, time_first: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """RWKV's WKV over key, value (b, s, c) with per-channel time_decay and time_first (c,) →
    (the output (b, s, c) in key's dtype, w = −exp(time_decay) in fp32, which backward keeps)."""
    w = -torch.exp(acc(time_decay))
    out = _wkv(w, acc(time_first), acc(key), acc(value))
    return out.to(key.dtype), w


@wkv.register_fake
def _wkv_fake(time_decay, time_first, key, value):
    return torch.empty_like(key, memory_format=torch.contiguous_format), time_decay.new_empty(time_decay.shape, dtype=torch.promote_types(time_decay.dtype, torch.float32))


def _wkv_setup(ctx, inputs, output):
    time_decay, time_first, key, value = inputs
    out, w = output
    ctx.save_for_backward(w, time_first, key, value, out)
    ctx.decay_dtype = time_decay.dtype
    ctx.mark_non_differentiable(w)


def _wkv_backward(ctx, grad_out, _grad_w):
    """(d time_decay, d time_first, d key, d value), recomputing the recurrence from what the
    forward kept (the kernel also reads its kept output; the recomputation needs the inputs only):
    d time_decay = dw · w, as w = −exp(time_decay). On fake tensors (the census) only their shapes."""
    w, time_first, key, value, _ = ctx.saved_tensors
    if is_fake(grad_out):
        return torch.empty_like(w, dtype=ctx.decay_dtype), torch.empty_like(time_first), torch.empty_like(key), torch.empty_like(value)
    with torch.enable_grad():
        leaves = [acc(t).detach().requires_grad_(True) for t in (w, time_first, key, value)]
        dw, du, dk, dv = torch.autograd.grad(_wkv(*leaves), leaves, acc(grad_out))
    return (dw * leaves[0].detach()).to(ctx.decay_dtype), du.to(time_first.dtype), dk.to(key.dtype), dv.to(value.dtype)


wkv.register_autograd(_wkv_backward, setup_context=_wkv_setup)


def speccat_rwkv_linear_attention(
    time_decay: Tensor, time_first: Tensor, key: Tensor, value: Tensor, state=None, return_state: bool = False
) -> tuple[Tensor, None]:
    """transformers' `rwkv_linear_attention` signature, computed by `speccat::wkv` as
    `RwkvLinearAttention` calls the CUDA kernel: fp16 inputs cast to fp32 first (the kernel has
    no fp16 variant), the output cast back.

    Training from the start of a sequence has no recurrent state in or out; the census never
    passes one, so a state is refused rather than ignored.
    """
    if state is not None or return_state:
        raise ValueError("speccat's WKV runs from an empty state and returns no final state")
    dtype = key.dtype
    if dtype == torch.float16:
        time_first, key, value = time_first.float(), key.float(), value.float()
    with kernel_scope(WKV.name):
        out = wkv(time_decay, time_first, key, value)[0]
    return out.to(dtype), None


def _book(call: CallSeen) -> KernelCall:
    """key, time_decay and value: the time mixing's width."""
    decay, key, value = call.args[0], call.args[2], call.args[3]
    return KernelCall("wkv", call.child, shapes(key=key.shape, time_decay=decay.shape, value=value.shape))


WKV = register(
    Kernel(
        op=torch.ops.speccat.wkv.default,
        kind="wkv",
        book=_book,
        calls=re.compile(r"^rwkv_linear_attention$"),  # transformers' entry to RWKV's WKV CUDA kernel (its CPU loop without one)
        stand_in=speccat_rwkv_linear_attention,
        keeps=Keeps(outputs="linrec", inputs="linrec"),
        # not per child: the output projection after it is the mixer's own
    )
)
