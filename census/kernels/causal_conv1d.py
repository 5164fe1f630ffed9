"""The causal-conv1d kernel as the custom op `speccat::causal_conv1d`, keeping only its input (and
the weights) as the kernel does, and its stand-in for transformers' `causal_conv1d_fn`
(docs/census.md, "How a config becomes a spec", step 4).

The kernel recomputes the convolution and its SiLU in backward, so neither output is kept. A
linear attention (the delta rules), a Mamba mixer that runs its scan apart (jamba) and a
short-convolution mixer (LFM2) call it before their own kernels. Its stand-in runs in no kernel
scope: what it keeps is booked to the child it runs in, as the layer's own projections are.
The op's fake implementation gives shapes only; its real CPU one computes in the accumulation
dtype, and its backward recomputes from the kept input.
"""

from __future__ import annotations

import re
from math import prod

import torch
from torch import Tensor

from speccat.census.kernels.tensors import acc, causal_conv1d_reference
from speccat.census.structure.kernel_registry import NAMESPACE, CallSeen, Kernel, KernelCall, register, shapes


@torch.library.custom_op(f"{NAMESPACE}::causal_conv1d", mutates_args=())
def causal_conv1d(x: Tensor, weight: Tensor, bias: Tensor | None, silu: bool) -> Tensor:
    """The causal-conv1d kernel: x (b, channels, s), weight (channels, width), optional bias and SiLU."""
    return causal_conv1d_reference(acc(x), acc(weight), None if bias is None else acc(bias), silu).to(x.dtype)


@causal_conv1d.register_fake
def _causal_conv1d_fake(x, weight, bias, silu):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _conv_setup(ctx, inputs, output):
    x, weight, bias, silu = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.silu = silu


def _conv_backward(ctx, grad_out):
    x, weight, bias = ctx.saved_tensors
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(True) if t is not None else None for t in (x, weight, bias)]
        # in the accumulation dtype, as the forward: x and the weights may differ in dtype
        # (bailing_hybrid's fp32 conv weights on bf16 activations); each gradient in its input's dtype
        out = causal_conv1d_reference(*(acc(t) if t is not None else None for t in leaves), ctx.silu)
        wanted = [t for t in leaves if t is not None]
        grads = iter(torch.autograd.grad(out, wanted, grad_out.to(out.dtype)))
    return tuple(next(grads) if t is not None else None for t in leaves) + (None,)


causal_conv1d.register_autograd(_conv_backward, setup_context=_conv_setup)


def speccat_causal_conv1d_fn(hidden_states: Tensor, weight: Tensor, bias: Tensor | None = None, activation: str | None = None, **kwargs) -> Tensor:
    """transformers' causal_conv1d_fn signature, computed by `speccat::causal_conv1d` (the causal-conv1d kernel)."""
    if activation not in (None, "silu", "swish"):
        raise ValueError(f"speccat's causal conv1d applies SiLU or nothing, not {activation!r}")
    if kwargs.get("seq_idx") is not None or kwargs.get("initial_states") is not None:
        raise ValueError("speccat's causal conv1d runs from an empty state over one sequence")
    return causal_conv1d(hidden_states, weight, bias, activation is not None)


def conv_flops(x, weight) -> int:
    """A depthwise causal convolution of x (b, channels, s) with weight (channels, width), as
    FlopCounterMode counts a convolution: 2·b·channels·s·width (Mamba's fused mixers count theirs so too)."""
    return 2 * prod(x) * weight[-1]


def _flops(x, weight, *args, out_shape=None, **kwargs) -> int:
    return conv_flops(x, weight)


def _book(call: CallSeen) -> KernelCall:
    """The conv's input and weight shapes, its input's element bytes and whether that input is a
    view into a larger storage (it keeps its input, so the whole storage)."""
    x, weight = call.args[:2]
    return KernelCall(
        "conv", call.child, shapes(x=x.shape, weight=weight.shape), in_bytes=x.element_size(),
        in_is_view=x.untyped_storage().nbytes() > x.numel() * x.element_size(),
    )


CAUSAL_CONV1D = register(
    Kernel(
        op=torch.ops.speccat.causal_conv1d.default,
        kind="conv",
        book=_book,
        calls=re.compile(r"^causal_conv1d_fn$"),
        stand_in=speccat_causal_conv1d_fn,
        flops=_flops,
    )
)
