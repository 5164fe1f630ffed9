"""speccat's selective-scan kernel (Mamba) as a torch.library custom op, and the function the
census puts in place of transformers' `mamba_inner_fn` while a layer runs (docs/census.md,
"State-space mixers").

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

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from speccat.census.kernels.attention import _kernel_scope
from speccat.census.kernels.ops import LIB, _acc, _causal_conv1d_ref

SCAN_CHUNK = 2048  # the selective-scan kernel's chunk: it keeps one state per chunk of this many tokens


def _selective_scan(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None) -> tuple[Tensor, Tensor]:
    """The selective scan token by token: u, delta (b, d, s), A (d, n), B, C (b, s, n).

    h_t = exp(Δ_t·A)·h_{t-1} + Δ_t·B_t·u_t; y_t = C_t·h_t + D·u_t. Returns y (b, d, s) and the
    chunk states (b, d, chunks, 2n): the decay product over the chunk and the state at its end.
    """
    b, d, s = u.shape
    state = u.new_zeros(b, d, A.shape[1])
    decay = torch.ones_like(state)
    outputs, chunks = [], []
    for t in range(s):
        step = torch.exp(delta[:, :, t, None] * A)
        state = step * state + delta[:, :, t, None] * B[:, t, None, :] * u[:, :, t, None]
        decay = step * decay
        outputs.append((state * C[:, t, None, :]).sum(-1))
        if (t + 1) % SCAN_CHUNK == 0 or t == s - 1:
            chunks.append(torch.cat([decay, state], dim=-1))
            decay = torch.ones_like(state)
    y = torch.stack(outputs, dim=-1)
    if D is not None:
        y = y + D[None, :, None] * u
    return y, torch.stack(chunks, dim=2)


def _rms(x: Tensor, weight: Tensor | None, eps: float, dim: int) -> Tensor:
    """RMS-normalise x over `dim` and scale by weight (mamba_ssm's rms_norm_forward); x as is without a weight."""
    if weight is None:
        return x
    shape = [1] * x.dim()
    shape[dim] = -1
    return x * torch.rsqrt(x.square().mean(dim, keepdim=True) + eps) * _acc(weight).view(shape)


def _inner(xz, conv_w, conv_b, x_proj_w, dt_proj_w, out_proj_w, A, D, delta_bias, b_rms, c_rms, dt_rms, eps, softplus):
    """mamba_inner_fn's forward in fp32: (y before the out projection's bias, x_dbl, B, C, out, chunk states).

    With norm weights (falcon-mamba), B and C are RMS-normalised over the state and Δ over the
    inner width after the dt projection, before its bias, as MambaInnerFn does."""
    b, _, s = xz.shape
    rank, n = dt_proj_w.shape[1], A.shape[1]
    x, z = _acc(xz).chunk(2, dim=1)
    u = _causal_conv1d_ref(x, _acc(conv_w), None if conv_b is None else _acc(conv_b), True)
    x_dbl = F.linear(u.transpose(1, 2).reshape(b * s, -1), _acc(x_proj_w))
    delta = _rms((_acc(dt_proj_w) @ x_dbl[:, :rank].t()).view(-1, b, s).transpose(0, 1), dt_rms, eps, 1)
    if delta_bias is not None:
        delta = delta + _acc(delta_bias)[None, :, None]
    if softplus:
        delta = F.softplus(delta)
    B = _rms(x_dbl[:, rank : rank + n].reshape(b, s, n), b_rms, eps, 2)
    C = _rms(x_dbl[:, rank + n :].reshape(b, s, n), c_rms, eps, 2)
    out, states = _selective_scan(u, delta, _acc(A), B, C, None if D is None else _acc(D))
    y = F.linear((out * F.silu(z)).transpose(1, 2), _acc(out_proj_w))
    return y, x_dbl, B, C, out, states


def _chunks(s: int) -> int:
    return math.ceil(s / SCAN_CHUNK)


@torch.library.custom_op(f"{LIB}::mamba_inner", mutates_args=())
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
        y = y + _acc(out_proj_b)
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
        xz.new_empty(b, two_d // 2, _chunks(s), 2 * n, dtype=torch.float32),
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
        grads = iter(torch.autograd.grad(y, wanted, _acc(grad_y)))
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
    with _kernel_scope("scan"):
        return mamba_inner(
            xz, weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight, out_proj_bias, A, D, delta_bias, bool(delta_softplus),
            b_rms_weight, c_rms_weight, dt_rms_weight, float(b_c_dt_rms_eps),
        )[0]  # fmt: skip


# --------------------------------------------------------------------------- Mamba2 (SSD)


def _gated_rms(y: Tensor, z: Tensor, weight: Tensor, eps: float, groups: int, norm_before_gate: bool) -> tuple[Tensor, Tensor]:
    """mamba_ssm's gated RMSNorm over `groups` groups of y's last dim: (output, fp32 rstd (groups, b·s))."""
    b, s, dim = y.shape
    if not norm_before_gate:
        y = y * F.silu(z)
    grouped = y.view(b, s, groups, dim // groups)
    rstd = torch.rsqrt(grouped.square().mean(-1) + eps)  # (b, s, groups)
    out = (grouped * rstd.unsqueeze(-1)).view(b, s, dim) * weight
    if norm_before_gate:
        out = out * F.silu(z)
    return out, rstd.permute(2, 0, 1).reshape(groups, b * s)


def _ssd(zxbcdt, conv_w, conv_b, dt_bias, A, D, rms_w, out_w, out_b, headdim, ngroups, eps, norm_before_gate, dt_min, dt_max):
    """mamba_split_conv1d_scan_combined's forward in fp32: (output, the scan's output out_x (b, s, heads, p), rstd)."""
    b, s, width = zxbcdt.shape
    heads = A.shape[0]
    dim = heads * headdim
    conv_dim = conv_w.shape[0]
    dstate = (conv_dim - dim) // ngroups // 2
    d_nonssm = (width - dim - conv_dim - heads) // 2
    zx0, z, xBC, dt = torch.split(_acc(zxbcdt), [2 * d_nonssm, dim, conv_dim, heads], dim=-1)
    xBC = _causal_conv1d_ref(xBC.transpose(1, 2), _acc(conv_w), None if conv_b is None else _acc(conv_b), True).transpose(1, 2)
    x, B, C = torch.split(xBC, [dim, ngroups * dstate, ngroups * dstate], dim=-1)
    x = x.reshape(b, s, heads, headdim)
    B = B.reshape(b, s, ngroups, dstate).repeat_interleave(heads // ngroups, dim=2)
    C = C.reshape(b, s, ngroups, dstate).repeat_interleave(heads // ngroups, dim=2)
    dt = F.softplus(dt + _acc(dt_bias)).clamp(min=dt_min, max=dt_max)
    a = _acc(A)
    state = x.new_zeros(b, heads, headdim, dstate)
    outputs = []
    for t in range(s):
        step = dt[:, t, :, None, None]
        state = torch.exp(step * a[None, :, None, None]) * state + step * x[:, t, :, :, None] * B[:, t, :, None, :]
        outputs.append((state * C[:, t, :, None, :]).sum(-1))
    y = torch.stack(outputs, dim=1)
    if D is not None:
        y = y + _acc(D)[None, None, :, None] * x
    flat = y.reshape(b, s, dim)
    if rms_w is not None:
        out, rstd = _gated_rms(flat, z, _acc(rms_w), eps, ngroups, norm_before_gate)
    else:
        out, rstd = flat * F.silu(z), flat.new_empty(0)
    if d_nonssm:
        gate, up = zx0.chunk(2, dim=-1)
        out = torch.cat([F.silu(gate) * up, out], dim=-1)
    if out_w is not None:
        out = F.linear(out, _acc(out_w), None if out_b is None else _acc(out_b))
    return out, y, rstd


@torch.library.custom_op(f"{LIB}::mamba_split_conv1d_scan", mutates_args=())
def mamba_split_conv1d_scan(
    zxbcdt: Tensor,
    conv_w: Tensor,
    conv_b: Tensor | None,
    dt_bias: Tensor,
    A: Tensor,
    D: Tensor | None,
    rms_w: Tensor | None,
    out_w: Tensor | None,
    out_b: Tensor | None,
    headdim: int,
    ngroups: int,
    eps: float,
    norm_before_gate: bool,
    dt_min: float,
    dt_max: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Mamba2's mixer after its in-projection: zxbcdt (b, s, in-projection width) → the output
    (b, s, hidden) in zxbcdt's dtype, then what backward keeps: out_x, the scan's output before the
    gate and norm (b, s, heads, head dim), and the gated norm's fp32 rstd (groups, b·s; empty without a norm)."""
    out, y, rstd = _ssd(zxbcdt, conv_w, conv_b, dt_bias, A, D, rms_w, out_w, out_b, headdim, ngroups, eps, norm_before_gate, dt_min, dt_max)
    return out.to(zxbcdt.dtype), y.to(zxbcdt.dtype), rstd.float()


@mamba_split_conv1d_scan.register_fake
def _mamba_split_conv1d_scan_fake(zxbcdt, conv_w, conv_b, dt_bias, A, D, rms_w, out_w, out_b, headdim, ngroups, eps, norm_before_gate, dt_min, dt_max):
    b, s, width = zxbcdt.shape
    heads = A.shape[0]
    dim = heads * headdim
    d_nonssm = (width - dim - conv_w.shape[0] - heads) // 2
    out_width = out_w.shape[0] if out_w is not None else d_nonssm + dim
    rstd = zxbcdt.new_empty(ngroups, b * s, dtype=torch.float32) if rms_w is not None else zxbcdt.new_empty(0, dtype=torch.float32)
    return zxbcdt.new_empty(b, s, out_width), zxbcdt.new_empty(b, s, heads, headdim), rstd


_SSD_TENSORS = ("zxbcdt", "conv_w", "conv_b", "dt_bias", "A", "D", "rms_w", "out_w", "out_b")


def _ssd_setup(ctx, inputs, output):
    tensors, options = inputs[: len(_SSD_TENSORS)], inputs[len(_SSD_TENSORS) :]
    _, out_x, rstd = output
    zxbcdt, conv_w, conv_b, dt_bias, A, D, rms_w, out_w, out_b = tensors
    ctx.save_for_backward(zxbcdt, conv_w, conv_b, out_x, A, D, dt_bias, rms_w, rstd, out_w, out_b)
    ctx.options = options
    ctx.mark_non_differentiable(out_x, rstd)


def _ssd_backward(ctx, grad_out, *_unused):
    """Recompute from zxbcdt and the weights (the kernel recomputes the conv and the chunk states too)."""
    zxbcdt, conv_w, conv_b, _, A, D, dt_bias, rms_w, _, out_w, out_b = ctx.saved_tensors
    tensors = (zxbcdt, conv_w, conv_b, dt_bias, A, D, rms_w, out_w, out_b)
    if is_fake(grad_out):
        grads = [torch.empty_like(t) if t is not None else None for t in tensors]
    else:
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(True) if t is not None else None for t in tensors]
            out = _ssd(*leaves, *ctx.options)[0]
            wanted = [t for t in leaves if t is not None]
            found = iter(torch.autograd.grad(out, wanted, _acc(grad_out)))
        grads = [next(found).to(t.dtype) if t is not None else None for t in tensors]
    return (*grads, *(None,) * len(ctx.options))


mamba_split_conv1d_scan.register_autograd(_ssd_backward, setup_context=_ssd_setup)


def speccat_mamba_split_conv1d_scan_combined(
    zxbcdt: Tensor,
    conv1d_weight: Tensor,
    conv1d_bias: Tensor | None,
    dt_bias: Tensor,
    A: Tensor,
    D: Tensor,
    chunk_size: int,
    initial_states: Tensor | None = None,
    seq_idx: Tensor | None = None,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    activation: str = "silu",
    rmsnorm_weight: Tensor | None = None,
    rmsnorm_eps: float = 1e-6,
    outproj_weight: Tensor | None = None,
    outproj_bias: Tensor | None = None,
    headdim: int | None = None,
    ngroups: int = 1,
    norm_before_gate: bool = True,
    **kwargs,
) -> Tensor:
    """transformers' `mamba_split_conv1d_scan_combined` signature, computed by `speccat::mamba_split_conv1d_scan`.

    Training from the start of one sequence: no initial or final states, no sequence index, a
    SiLU conv and per-head D; anything else is refused rather than ignored.
    """
    if initial_states is not None or seq_idx is not None or return_final_states:
        raise ValueError("speccat's SSD scan runs one sequence from an empty state and returns no final state")
    if activation not in ("silu", "swish") or D.dim() != 1 or headdim is None:
        raise ValueError("speccat's SSD scan runs a SiLU conv with per-head D and a stated head dim")
    weight = conv1d_weight.reshape(conv1d_weight.shape[0], conv1d_weight.shape[-1])
    with _kernel_scope("ssd"):
        return mamba_split_conv1d_scan(
            zxbcdt, weight, conv1d_bias, dt_bias, A, D, rmsnorm_weight, outproj_weight, outproj_bias,
            int(headdim), int(ngroups), float(rmsnorm_eps or 1e-6), bool(norm_before_gate), float(dt_limit[0]), float(dt_limit[1]),
        )[0]  # fmt: skip
