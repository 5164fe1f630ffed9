"""speccat's selective scan on its own (`speccat::selective_scan`), and the function the census
puts in place of transformers' `mamba_selective_scan` (mamba_ssm's `selective_scan_fn`) while a
layer runs (docs/census.md, "State-space mixers").

Some Mamba mixers (jamba's) do not call the fused `mamba_inner_fn`: they call the causal-conv1d
kernel, run the x and dt projections (and norms on dt, B and C) in torch, then the selective
scan, then the output projection. The conv runs through `speccat::causal_conv1d`
(census/kernels/causal_conv1d.py); the scan through this op.

What mamba_ssm's `SelectiveScanFn` keeps for backward (mamba_ssm/ops/selective_scan_interface.py;
mamba_ssm is not installed here, so this is the fact relied on): it first makes u, delta, B, C
and z contiguous where their last stride is not 1 (and D contiguous), then keeps u, delta, A, B,
C, D, z, delta_bias, the scan's fp32 chunk states `x` (batch, inner, ⌈seq/2048⌉, 2·state: the
running decay product and state of each inner × state channel, in A's dtype) and, when z is
given, `out`, the scan's output before the SiLU gate (in u's dtype). It returns the gated output
out·silu(z), which nothing keeps. Without z it keeps no `out`. Backward recomputes everything
else from those.

`speccat::selective_scan` keeps exactly that set. Its fake implementation gives shapes only; its
real one runs the scan in fp32 torch (census/kernels/scan_math.py `selective_scan`) and its backward
recomputes from what was kept, so the op is correct on real tensors too.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from speccat.census.kernels import scan_math
from speccat.census.kernels.scope import kernel_scope
from speccat.census.kernels.tensors import acc
from speccat.census.structure.kernel_registry import NAMESPACE, CallSeen, Kernel, KernelCall, Keeps, register, shapes


def _scan(u, delta, A, B, C, D, z, delta_bias, softplus):
    """The scan in the accumulation dtype: u, delta, z (b, inner, s); B, C (b, state, s).
    Returns (gated output, output before the gate, chunk states)."""
    delta = acc(delta)
    if delta_bias is not None:
        delta = delta + acc(delta_bias)[None, :, None]
    if softplus:
        delta = F.softplus(delta)
    y, states = scan_math.selective_scan(acc(u), delta, acc(A), acc(B).transpose(1, 2), acc(C).transpose(1, 2), None if D is None else acc(D))
    gated = y * F.silu(acc(z)) if z is not None else y
    return gated, y, states


@torch.library.custom_op(f"{NAMESPACE}::selective_scan", mutates_args=())
def selective_scan(
    u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None, z: Tensor | None, delta_bias: Tensor | None, softplus: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """The selective scan: (gated output (b, inner, s) in u's dtype, `out` before the gate (empty
    without z), fp32 chunk states (b, inner, chunks, 2·state))."""
    gated, y, states = _scan(u, delta, A, B, C, D, z, delta_bias, softplus)
    out = y.to(u.dtype) if z is not None else u.new_empty(0)
    return gated.to(u.dtype), out, states.float()


@selective_scan.register_fake
def _selective_scan_fake(u, delta, A, B, C, D, z, delta_bias, softplus):
    b, d, s = u.shape
    out = u.new_empty(b, d, s) if z is not None else u.new_empty(0)
    return u.new_empty(b, d, s), out, u.new_empty(b, d, scan_math.scan_chunks(s), 2 * A.shape[1], dtype=torch.float32)


_TENSORS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")


def _setup(ctx, inputs, output):
    u, delta, A, B, C, D, z, delta_bias, softplus = inputs
    _, out, states = output
    ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, states, out if z is not None else None)
    ctx.softplus = softplus
    ctx.mark_non_differentiable(out, states)


def _backward(ctx, grad, *_unused):
    """Gradients of the inputs, recomputed from what was kept; on fake tensors only their shapes."""
    tensors = ctx.saved_tensors[: len(_TENSORS)]
    if is_fake(grad):
        return (*(torch.empty_like(t) if t is not None else None for t in tensors), None)
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(True) if t is not None else None for t in tensors]
        gated = _scan(*leaves, ctx.softplus)[0]
        wanted = [t for t in leaves if t is not None]
        found = iter(torch.autograd.grad(gated, wanted, acc(grad)))
    return (*(next(found).to(t.dtype) if t is not None else None for t in tensors), None)


selective_scan.register_autograd(_backward, setup_context=_setup)


def _own(t: Tensor | None) -> Tensor | None:
    """The tensor as SelectiveScanFn hands it to the kernel: a contiguous copy where its last stride is not 1."""
    return t if t is None or t.stride(-1) == 1 else t.contiguous()


def speccat_selective_scan_fn(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    **kwargs,
) -> Tensor:
    """transformers' `mamba_selective_scan` (mamba_ssm's `selective_scan_fn`) signature, computed by
    `speccat::selective_scan`.

    Training from the start of one sequence with input-dependent B and C of one group: a final
    state, packed sequences, a fixed or grouped B or C and complex A are refused, not ignored.
    """
    if return_last_state or kwargs.get("cu_seqlens") is not None or kwargs.get("seq_idx") is not None:
        raise ValueError("speccat's selective scan runs one sequence from an empty state and returns no final state")
    if B.dim() != 3 or C.dim() != 3 or A.is_complex():
        raise ValueError("speccat's selective scan runs real A with input-dependent B and C (batch, state, tokens)")
    with kernel_scope(SCAN_APART.name):
        D = D.contiguous() if D is not None else None
        return selective_scan(_own(u), _own(delta), A, _own(B), _own(C), D, _own(z), delta_bias, bool(delta_softplus))[0]


def _book(call: CallSeen) -> KernelCall:
    """u and A: the inner width and the state; its conv and projections ran outside it; B a view
    into a larger storage as the kernel is handed it (after SelectiveScanFn's contiguous copies)."""
    u, A, B = call.args[0], call.args[2], call.args[3]
    return KernelCall("scan", call.child, shapes(u=u.shape, A=A.shape), apart=True, bc_is_view=B.untyped_storage().nbytes() > B.numel() * B.element_size())


SCAN_APART = register(
    Kernel(
        op=torch.ops.speccat.selective_scan.default,
        kind="scan",
        book=_book,
        calls=re.compile(r"^(mamba_)?selective_scan(_fn)?$"),  # mamba_ssm's selective_scan_fn, as transformers names it
        stand_in=speccat_selective_scan_fn,
        keeps=Keeps(outputs="linrec", inputs="linrec"),
        # not per child: the output projection after it is one of the mixer's own (as the fused
        # kernel's), counted with them (the describe room's `scan_projections`)
    )
)
