"""Mamba2's fused mixer (mamba_ssm's `mamba_split_conv1d_scan_combined`: conv, chunked SSD scan,
gated norm and output projection in one kernel) as the custom op
`speccat::mamba_split_conv1d_scan`, and the function the census puts in place of transformers'
`mamba_split_conv1d_scan_combined` while a layer runs (docs/census.md, "State-space mixers").

The fused kernel recomputes the conv and the chunk states in backward and keeps its input
zxbcdt (the in-projection's output), the conv's, norm's and output projection's weights, A, D
and dt_bias, the scan's output before the gate and norm (`out_x`, b × s × heads × head dim) and
the gated norm's fp32 rstd (one per group and token). `speccat::mamba_split_conv1d_scan` keeps
exactly that. Its fake implementation gives shapes only; its real CPU one runs the scan token by
token in fp32 and its backward recomputes from what was kept, so the op is correct on real
tensors too (the tests compare it with transformers' torch path).
"""

from __future__ import annotations

import re
from math import prod

import torch
import torch.nn.functional as F
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from speccat.census.kernels.causal_conv1d import conv_flops
from speccat.census.kernels.scope import kernel_scope
from speccat.census.kernels.tensors import acc, causal_conv1d_reference
from speccat.census.structure.kernel_registry import NAMESPACE, CallSeen, Kernel, KernelCall, Keeps, register, shapes


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
    zx0, z, xBC, dt = torch.split(acc(zxbcdt), [2 * d_nonssm, dim, conv_dim, heads], dim=-1)
    xBC = causal_conv1d_reference(xBC.transpose(1, 2), acc(conv_w), None if conv_b is None else acc(conv_b), True).transpose(1, 2)
    x, B, C = torch.split(xBC, [dim, ngroups * dstate, ngroups * dstate], dim=-1)
    x = x.reshape(b, s, heads, headdim)
    B = B.reshape(b, s, ngroups, dstate).repeat_interleave(heads // ngroups, dim=2)
    C = C.reshape(b, s, ngroups, dstate).repeat_interleave(heads // ngroups, dim=2)
    dt = F.softplus(dt + acc(dt_bias)).clamp(min=dt_min, max=dt_max)
    a = acc(A)
    state = x.new_zeros(b, heads, headdim, dstate)
    outputs = []
    for t in range(s):
        step = dt[:, t, :, None, None]
        state = torch.exp(step * a[None, :, None, None]) * state + step * x[:, t, :, :, None] * B[:, t, :, None, :]
        outputs.append((state * C[:, t, :, None, :]).sum(-1))
    y = torch.stack(outputs, dim=1)
    if D is not None:
        y = y + acc(D)[None, None, :, None] * x
    flat = y.reshape(b, s, dim)
    if rms_w is not None:
        out, rstd = _gated_rms(flat, z, acc(rms_w), eps, ngroups, norm_before_gate)
    else:
        out, rstd = flat * F.silu(z), flat.new_empty(0)
    if d_nonssm:
        gate, up = zx0.chunk(2, dim=-1)
        out = torch.cat([F.silu(gate) * up, out], dim=-1)
    if out_w is not None:
        out = F.linear(out, acc(out_w), None if out_b is None else acc(out_b))
    return out, y, rstd


@torch.library.custom_op(f"{NAMESPACE}::mamba_split_conv1d_scan", mutates_args=())
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
            found = iter(torch.autograd.grad(out, wanted, acc(grad_out)))
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
    with kernel_scope(SSD.name):
        return mamba_split_conv1d_scan(
            zxbcdt, weight, conv1d_bias, dt_bias, A, D, rmsnorm_weight, outproj_weight, outproj_bias,
            int(headdim), int(ngroups), float(rmsnorm_eps or 1e-6), bool(norm_before_gate), float(dt_limit[0]), float(dt_limit[1]),
        )[0]  # fmt: skip


def _flops(zxbcdt, conv_w, conv_b, dt_bias, A, D, rms_w, out_w, *args, out_shape=None, **kwargs) -> int:
    """The mixer's work after its in-projection that FlopCounterMode would count written in torch:
    its convolution and its output projection (the scan, element-wise, counts 0)."""
    b, s, _ = zxbcdt
    projection = 2 * b * s * prod(out_w) if out_w is not None else 0
    return conv_flops((b, conv_w[0], s), conv_w) + projection


def _book(call: CallSeen) -> KernelCall:
    """zxbcdt, (heads, head dim) and (groups, state), the state read off the conv's width."""
    zxbcdt, conv_w, A, headdim, groups = call.args[0], call.args[1], call.args[4], call.args[9], call.args[10]
    state = (conv_w.shape[0] - A.shape[0] * headdim) // groups // 2
    return KernelCall("ssd", call.child, shapes(zxbcdt=zxbcdt.shape, heads=(A.shape[0], headdim), groups=(groups, state)))


SSD = register(
    Kernel(
        op=torch.ops.speccat.mamba_split_conv1d_scan.default,
        kind="ssd",
        book=_book,
        calls=re.compile(r"^mamba2?_split_conv1d_scan_combined$"),
        stand_in=speccat_mamba_split_conv1d_scan_combined,
        keeps=Keeps(outputs="linrec", inputs="linrec"),
        per_child=True,
        fuses_conv=True,
        flops=_flops,
    )
)
