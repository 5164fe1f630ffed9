"""The RG-LRU's linear recurrence (recurrent_gemma's `_rnn_scan`, linear mode) as a torch.library
custom op keeping what transformers' own loop keeps (docs/census.md, "State-space mixers"), and
the method the census puts in place of `_rnn_scan` while a layer runs.

transformers has no kernel for the RG-LRU, on GPU or CPU: training runs its Python loop over the
tokens, h_t = a_t·h_{t−1} + x_t in an fp32 accumulator, y_t = h_t in x's dtype. Per token the
loop's autograd keeps the product's two operands: the gate a_t cast to fp32 and the fp32 state
h_{t−1} (the first token multiplies the zero start state, which needs no gradient: its gate is
not kept, the zero state is). Run as written on fake tensors the loop costs about 0.1 s per token.

`speccat::rg_lru_scan` keeps the same bytes as whole tensors instead of one slice per token: the
fp32 states before each token (b, s, w: the start state, then h_0 … h_{s−2}) and the fp32 gates
of every token but the first (b, s − 1, w). It has a fake implementation (shapes only) and a
real CPU one that runs the loop as transformers writes it, whose backward runs the recurrence
backwards from what was kept (the tests compare it with transformers' loop).
"""

from __future__ import annotations

import re

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from speccat.census.kernels.scope import kernel_scope
from speccat.census.structure.kernel_registry import NAMESPACE, CallSeen, Kernel, KernelCall, Keeps, register, shapes

ACC = torch.float32  # the loop's accumulator dtype (transformers' `acc_dtype`)


@torch.library.custom_op(f"{NAMESPACE}::rg_lru_scan", mutates_args=())
def rg_lru_scan(x: Tensor, a: Tensor, h0: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """h_t = a_t·h_{t−1} + x_t over x, a (b, s, w), from the fp32 start state h0 (b, w) →
    (the states in x's dtype (b, s, w), the last state (b, w) fp32, and what backward keeps:
    the fp32 states before each token (b, s, w) and the fp32 gates a_1 … a_{s−1} (b, s − 1, w))."""
    before = torch.empty(x.shape, dtype=ACC, device=x.device)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    h = h0.to(ACC)
    for t in range(x.shape[1]):
        before[:, t] = h
        h = a[:, t].to(ACC) * h
        h = h + x[:, t].to(ACC)
        out[:, t] = h.to(x.dtype)
    return out, h.clone(), before, a[:, 1:].to(ACC, copy=True)


@rg_lru_scan.register_fake
def _rg_lru_scan_fake(x, a, h0):
    b, s, w = x.shape
    return (
        torch.empty_like(x, memory_format=torch.contiguous_format),
        x.new_empty((b, w), dtype=ACC),
        x.new_empty((b, s, w), dtype=ACC),
        x.new_empty((b, max(s - 1, 0), w), dtype=ACC),
    )


def _setup(ctx, inputs, output):
    x, a, _ = inputs
    _, _, before, gates = output
    ctx.save_for_backward(before, gates)
    ctx.dtypes = (x.dtype, a.dtype)
    ctx.mark_non_differentiable(before, gates)


def _backward(ctx, grad_out, grad_last, _before, _gates):
    """(d x, d a, None): dh_t = dy_t + a_{t+1}·dh_{t+1} (plus the last state's gradient at the
    last token), d x_t = dh_t, d a_t = dh_t·h_{t−1}. The start state gets none (the stand-in
    refuses one that requires a gradient). On fake tensors (the census) only their shapes."""
    before, gates = ctx.saved_tensors
    x_dtype, a_dtype = ctx.dtypes
    if is_fake(before):
        return torch.empty_like(before, dtype=x_dtype), torch.empty_like(before, dtype=a_dtype), None
    dx = torch.empty_like(before, dtype=x_dtype)
    da = torch.empty_like(before, dtype=a_dtype)
    dh = grad_last.to(ACC) if grad_last is not None else torch.zeros_like(before[:, 0])
    for t in reversed(range(before.shape[1])):
        if grad_out is not None:
            dh = dh + grad_out[:, t].to(ACC)
        dx[:, t] = dh.to(x_dtype)
        da[:, t] = (dh * before[:, t]).to(a_dtype)
        if t:
            dh = dh * gates[:, t - 1]
    return dx, da, None


rg_lru_scan.register_autograd(_backward, setup_context=_setup)


def speccat_rnn_scan(
    self, hidden_states: Tensor, recurrent_gate: Tensor, reset: Tensor, recurrent_states: Tensor | None, acc_dtype: torch.dtype = ACC
) -> tuple[Tensor, Tensor]:
    """transformers' `RecurrentGemmaRglru._rnn_scan` signature in linear mode (more than one
    token), the loop computed by `speccat::rg_lru_scan`: the gate times ~reset first, in torch, as
    transformers does (that product keeps ~reset). Training from the start of a sequence starts
    from a zero state (or the cache's zeros); a start state that requires a gradient, a one-token
    step (sampling) or an accumulator other than fp32 is refused rather than run otherwise."""
    if hidden_states.shape[1] == 1 or acc_dtype != ACC or (recurrent_states is not None and recurrent_states.requires_grad):
        raise ValueError("speccat's RG-LRU scan runs the linear mode over a sequence from a start state without gradient, in fp32")
    recurrent_gate = recurrent_gate * ~reset
    if recurrent_states is None:
        recurrent_states = torch.zeros(hidden_states[:, 0].shape, dtype=ACC, device=hidden_states.device)
    with kernel_scope(RG_LRU.name):
        out, last, _, _ = rg_lru_scan(hidden_states, recurrent_gate, recurrent_states.to(hidden_states.device))
    return out, last


def _book(call: CallSeen) -> KernelCall:
    """The recurrence's input x and gate a."""
    x, a = call.args[0], call.args[1]
    return KernelCall("rglru", call.child, shapes(x=x.shape, a=a.shape))


RG_LRU = register(
    Kernel(
        op=torch.ops.speccat.rg_lru_scan.default,
        kind="rglru",
        book=_book,
        calls=re.compile(r"^_rnn_scan$"),  # a method of the RG-LRU module (recurrent_gemma's Python loop), no kernel hook
        method=True,
        stand_in=speccat_rnn_scan,
        keeps=Keeps(outputs="linrec", inputs="linrec"),
        # not per child: the projections around it are the mixer's own
    )
)
