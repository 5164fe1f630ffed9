"""Mamba's fused mixer (mamba_ssm's `mamba_inner_fn`: conv, projections and selective scan in one
kernel) as the custom op `speccat::mamba_inner`, and the function the census puts in place of
transformers' `mamba_inner_fn` while a layer runs (docs/census.md, "State-space mixers").

mamba_ssm's fused `mamba_inner_fn` runs the causal conv, the x/dt projections, the selective
scan, the SiLU gate and the output projection in one autograd function. At its default
checkpoint level it recomputes the conv output and the time steps in backward and keeps:
xz (a contiguous copy of the in-projection's output, both halves), x_dbl (the x projection's
output: dt rank + 2·state wide), B and C as their own contiguous copies (b, 1, state, s), the
scan's output before the gate (`out`, inner wide), the scan's chunk states (fp32, one per 2048
tokens: the running decay product and state of each of the inner × state channels), and the
non-parameter A (fp32), D and delta_bias it was handed. Never the gated output (recomputed).

`speccat::mamba_inner` keeps exactly that. It has a fake implementation (shapes only) and a
real CPU one in plain fp32 torch whose backward recomputes from what was kept, so the op is
correct on real tensors too (the tests compare it with transformers' slow path).
"""

from __future__ import annotations

import re
from math import prod

import torch
import torch.nn.functional as F
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from speccat.census.kernels.causal_conv1d import conv_flops
from speccat.census.kernels.scan_math import scan_chunks, selective_scan
from speccat.census.kernels.scope import kernel_scope
from speccat.census.kernels.tensors import acc, causal_conv1d_reference
from speccat.census.structure.kernel_registry import NAMESPACE, CallSeen, Kernel, KernelCall, Keeps, register, shapes


def _rms(x: Tensor, weight: Tensor | None, eps: float, dim: int) -> Tensor:
    """RMS-normalise x over `dim` and scale by weight (mamba_ssm's rms_norm_forward); x as is without a weight."""
    if weight is None:
        return x
    shape = [1] * x.dim()
    shape[dim] = -1
    return x * torch.rsqrt(x.square().mean(dim, keepdim=True) + eps) * acc(weight).view(shape)


def _inner(xz, conv_w, conv_b, x_proj_w, dt_proj_w, out_proj_w, A, D, delta_bias, b_rms, c_rms, dt_rms, eps, softplus):
    """mamba_inner_fn's forward in fp32: (y before the out projection's bias, x_dbl, B, C, out, chunk states).

    With norm weights (falcon-mamba), B and C are RMS-normalised over the state and Δ over the
    inner width after the dt projection, before its bias, as MambaInnerFn does."""
    b, _, s = xz.shape
    rank, n = dt_proj_w.shape[1], A.shape[1]
    x, z = acc(xz).chunk(2, dim=1)
    u = causal_conv1d_reference(x, acc(conv_w), None if conv_b is None else acc(conv_b), True)
    x_dbl = F.linear(u.transpose(1, 2).reshape(b * s, -1), acc(x_proj_w))
    delta = _rms((acc(dt_proj_w) @ x_dbl[:, :rank].t()).view(-1, b, s).transpose(0, 1), dt_rms, eps, 1)
    if delta_bias is not None:
        delta = delta + acc(delta_bias)[None, :, None]
    if softplus:
        delta = F.softplus(delta)
    B = _rms(x_dbl[:, rank : rank + n].reshape(b, s, n), b_rms, eps, 2)
    C = _rms(x_dbl[:, rank + n :].reshape(b, s, n), c_rms, eps, 2)
    out, states = selective_scan(u, delta, acc(A), B, C, None if D is None else acc(D))
    y = F.linear((out * F.silu(z)).transpose(1, 2), acc(out_proj_w))
    return y, x_dbl, B, C, out, states


@torch.library.custom_op(f"{NAMESPACE}::mamba_inner", mutates_args=())
def mamba_inner(
    xz: Tensor,
    conv_w: Tensor,
    conv_b: Tensor | None,
    x_proj_w: Tensor,
    dt_proj_w: Tensor,
    out_proj_w: Tensor,
    out_proj_b: Tensor | None,
    A: Tensor,
    D: Tensor | None,
    delta_bias: Tensor | None,
    softplus: bool,
    b_rms: Tensor | None = None,
    c_rms: Tensor | None = None,
    dt_rms: Tensor | None = None,
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Mamba's mixer after its in-projection: xz (b, 2·inner, s) → y (b, s, hidden) in xz's dtype,
    then what backward keeps: x_dbl (b·s, rank + 2n), B and C (b, 1, n, s), out (b, inner, s) and
    the fp32 chunk states (b, inner, chunks, 2n). The norm weights (falcon-mamba's) normalise B, C
    and Δ inside the kernel; they change no shape and nothing more is kept (the weights are the
    model's own tensors)."""
    y, x_dbl, B, C, out, states = _inner(xz, conv_w, conv_b, x_proj_w, dt_proj_w, out_proj_w, A, D, delta_bias, b_rms, c_rms, dt_rms, eps, softplus)
    if out_proj_b is not None:
        y = y + acc(out_proj_b)
    dtype = xz.dtype
    b, _, s = xz.shape
    as_kept = lambda m: m.transpose(1, 2).unsqueeze(1).contiguous().to(dtype)  # (b, 1, n, s)  # noqa: E731
    return y.to(dtype), x_dbl.to(dtype), as_kept(B), as_kept(C), out.to(dtype), states.float()


@mamba_inner.register_fake
def _mamba_inner_fake(xz, conv_w, conv_b, x_proj_w, dt_proj_w, out_proj_w, out_proj_b, A, D, delta_bias, softplus, b_rms=None, c_rms=None, dt_rms=None, eps=1e-6):
    b, two_d, s = xz.shape
    n = A.shape[1]
    return (
        xz.new_empty(b, s, out_proj_w.shape[0]),
        xz.new_empty(b * s, x_proj_w.shape[0]),
        xz.new_empty(b, 1, n, s),
        xz.new_empty(b, 1, n, s),
        xz.new_empty(b, two_d // 2, s),
        xz.new_empty(b, two_d // 2, scan_chunks(s), 2 * n, dtype=torch.float32),
    )


def _mamba_setup(ctx, inputs, output):
    xz, conv_w, conv_b, x_proj_w, dt_proj_w, out_proj_w, out_proj_b, A, D, delta_bias, softplus, b_rms, c_rms, dt_rms, eps = inputs
    _, x_dbl, B, C, out, states = output
    ctx.save_for_backward(xz, conv_w, conv_b, x_dbl, x_proj_w, dt_proj_w, out_proj_w, A, B, C, D, delta_bias, states, out, b_rms, c_rms, dt_rms)
    ctx.softplus, ctx.eps = softplus, eps
    ctx.has_out_bias = out_proj_b is not None
    ctx.mark_non_differentiable(x_dbl, B, C, out, states)


def _grads(grad_y: Tensor, inputs: tuple, norms: tuple, softplus: bool) -> list[Tensor | None]:
    """Gradients of the inputs, recomputing the mixer from the kept xz and weights (the kernel
    recomputes the conv and Δ too). On fake tensors (the census) only their shapes."""
    if is_fake(grad_y):
        return [torch.empty_like(t) if t is not None else None for t in inputs]
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(True) if t is not None else None for t in inputs]
        y = _inner(*leaves, *norms, softplus)[0]
        wanted = [t for t in leaves if t is not None]
        grads = iter(torch.autograd.grad(y, wanted, acc(grad_y)))
    return [next(grads).to(t.dtype) if t is not None else None for t in inputs]


def _mamba_backward(ctx, grad_y, *_unused):
    xz, conv_w, conv_b, _, x_proj_w, dt_proj_w, out_proj_w, A, _, _, D, delta_bias, _, _, b_rms, c_rms, dt_rms = ctx.saved_tensors
    dxz, dconv_w, dconv_b, dx_proj_w, ddt_proj_w, dout_proj_w, dA, dD, ddelta_bias = _grads(
        grad_y, (xz, conv_w, conv_b, x_proj_w, dt_proj_w, out_proj_w, A, D, delta_bias), (b_rms, c_rms, dt_rms, ctx.eps), ctx.softplus
    )
    dout_proj_b = grad_y.sum(dim=(0, 1)) if ctx.has_out_bias else None
    return dxz, dconv_w, dconv_b, dx_proj_w, ddt_proj_w, dout_proj_w, dout_proj_b, dA, dD, ddelta_bias, None, None, None, None, None


mamba_inner.register_autograd(_mamba_backward, setup_context=_mamba_setup)


def speccat_mamba_inner_fn(
    xz: Tensor,
    conv1d_weight: Tensor,
    conv1d_bias: Tensor | None,
    x_proj_weight: Tensor,
    delta_proj_weight: Tensor,
    out_proj_weight: Tensor,
    out_proj_bias: Tensor | None,
    A: Tensor,
    B: Tensor | None = None,
    C: Tensor | None = None,
    D: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = True,
    b_rms_weight: Tensor | None = None,
    c_rms_weight: Tensor | None = None,
    dt_rms_weight: Tensor | None = None,
    b_c_dt_rms_eps: float = 1e-6,
    **kwargs,
) -> Tensor:
    """transformers' `mamba_inner_fn` signature, computed by `speccat::mamba_inner`.

    The input-dependent B and C (the projections make them) are the only form the census runs;
    fixed B or C are refused rather than ignored. falcon-mamba's B, C and Δ norm weights run
    inside the kernel, as mamba_ssm's MambaInnerFn (2.2.2 on) runs them: its saves are the same
    set (B and C kept after their norm; the weights are the model's).
    """
    if B is not None or C is not None:
        raise ValueError("speccat's selective scan runs input-dependent B and C")
    xz = xz.contiguous()  # the kernel's own copy when the in-projection's output is seen transposed
    weight = conv1d_weight.reshape(conv1d_weight.shape[0], conv1d_weight.shape[-1])  # (d, 1, w) → (d, w): a view
    with kernel_scope(MAMBA_INNER.name):
        return mamba_inner(
            xz, weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight, out_proj_bias, A, D, delta_bias, bool(delta_softplus),
            b_rms_weight, c_rms_weight, dt_rms_weight, float(b_c_dt_rms_eps),
        )[0]  # fmt: skip


def _flops(xz, conv_w, conv_b, x_proj_w, dt_proj_w, out_proj_w, *args, out_shape=None, **kwargs) -> int:
    """The mixer's work after its in-projection that FlopCounterMode would count written in torch:
    its convolution and its x, dt and output projections, which run inside the op (the scan
    itself, element-wise, counts 0)."""
    b, two_inner, s = xz
    x = (b, two_inner // 2, s)
    tokens = b * s
    projections = prod(x_proj_w) + prod(dt_proj_w) + prod(out_proj_w)
    return conv_flops(x, conv_w) + 2 * tokens * projections


def _book(call: CallSeen) -> KernelCall:
    """xz, A and the dt projection's weight: the mixer's inner width, state and dt rank."""
    xz, dt_w, A = call.args[0], call.args[4], call.args[7]
    return KernelCall("scan", call.child, shapes(xz=xz.shape, A=A.shape, dt_weight=dt_w.shape))


MAMBA_INNER = register(
    Kernel(
        op=torch.ops.speccat.mamba_inner.default,
        kind="scan",
        book=_book,
        calls=re.compile(r"^mamba_inner_fn$"),
        stand_in=speccat_mamba_inner_fn,
        keeps=Keeps(outputs="linrec", inputs="linrec"),
        per_child=True,
        fuses_conv=True,
        flops=_flops,
    )
)
