"""Attention written outside transformers' attention interface, routed through speccat's kernel.

Most models dispatch attention through transformers' AttentionInterface, where `speccat` is
registered (census/attention.py). Others call `torch.nn.functional.scaled_dot_product_attention`
themselves (falcon), or write attention as eager code: a score matmul q·kᵀ, a mask or bias,
a softmax, maybe a dropout, then a matmul with v (bloom, mpt, gpt-neo, openai-gpt, xglm...).
While the representative layers run, a TorchFunctionMode routes both to the same
`speccat::flash_attention` op, so every transformers-native attention keeps what a flash
kernel keeps:

- an SDPA call becomes one kernel call (q, k, v as given, causal, its dropout);
- eager code is recognised by shape: a matmul whose output is seq × seq from a (…, s, d) and a
  (…, d, s) operand (d ≠ s) is a score matmul. It and every op that reads its result (scale,
  mask, bias, softcap, softmax, dropout) run without autograd and inside the kernel's scope
  (nothing is kept, no dropout counted), until a matmul of that seq × seq result with a value
  tensor (…, s, dv): that matmul becomes the kernel call with the score matmul's q and k,
  and the dropout probability the eager code applied. A value matmul reached with no softmax
  between it and the score matmul is not softmax attention (minimax's lightning attention
  multiplies its block scores by a decay mask): the layer is refused as `unsupported_layer`.

The bias or mask the eager code added (ALiBi, a sliding window as a mask) is not read: like
FlashAttention, the kernel keeps the same tensors whatever mask it applies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from speccat.census import attention
from speccat.census.spec import SpecError

_MATMULS = {
    torch.matmul,
    torch.Tensor.matmul,
    torch.Tensor.__matmul__,
    torch.bmm,
    torch.Tensor.bmm,
}
_BADDBMM = {torch.baddbmm, torch.Tensor.baddbmm}
_DROPOUTS = {F.dropout, torch.dropout, torch.nn.functional.dropout}
_SOFTMAXES = {F.softmax, torch.softmax, torch.Tensor.softmax, torch._softmax, torch._safe_softmax}


@dataclass
class _Scores:
    q: torch.Tensor  # (…, s, d)
    k: torch.Tensor  # (…, s, d)
    dropout: float = 0.0
    softmax: bool = False  # a softmax read the scores (or what was computed from them)


def _as_heads(x: torch.Tensor) -> torch.Tensor:
    """(…, s, d) as (b, heads, s, d): 3-D (b·heads, s, d) becomes (1, b·heads, s, d)."""
    if x.dim() == 4:
        return x
    return x.reshape(1, -1, *x.shape[-2:])


class AttentionRoute(TorchFunctionMode):
    """Routes SDPA calls and eager attention of the running layers to speccat's kernel."""

    def __init__(self, seq_length: int):
        super().__init__()
        self.seq = seq_length
        self.marked: dict[int, tuple[torch.Tensor, _Scores]] = {}  # id → (tensor kept alive, its scores)

    # -- helpers ----------------------------------------------------------------------------

    def _mark(self, out, scores: _Scores) -> None:
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.marked[id(t)] = (t, scores)

    def _scores_of(self, args, kwargs) -> _Scores | None:
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor) and id(t) in self.marked and self.marked[id(t)][0] is t:
                return self.marked[id(t)][1]
        return None

    def _is_score(self, a, b) -> bool:
        s = self.seq
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dim() >= 3
            and b.dim() >= 3
            and a.shape[-2] == s
            and b.shape[-1] == s
            and a.shape[-1] == b.shape[-2]
            and a.shape[-1] != s
        )

    def _kernel(self, q, k, v, dropout: float, scale: float | None = None) -> torch.Tensor:
        """out (…, s, dv) in v's layout, from the flash kernel over q, k, v (…, s, d)."""
        dtype = v.dtype
        q4, k4, v4 = (_as_heads(x.to(dtype)) for x in (q, k, v))
        out, _ = attention.speccat_attention(None, q4, k4, v4, None, dropout=dropout, scaling=scale, is_causal=True)
        return out.transpose(1, 2).reshape(*v.shape[:-1], out.shape[-1])

    # -- the mode ---------------------------------------------------------------------------

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            return self._sdpa(*args, **kwargs)
        scores = self._scores_of(args, kwargs)
        if scores is not None:
            if func in _MATMULS and len(args) == 2 and args[0] is not None and id(args[0]) in self.marked and id(args[1]) not in self.marked:
                value = args[1]
                if isinstance(value, torch.Tensor) and value.shape[-2] == self.seq:
                    if not scores.softmax:
                        raise SpecError(
                            "unsupported_layer",
                            f"a score matmul q·kᵀ {tuple(scores.q.shape)} reaches its value matmul with no softmax between: "
                            "not softmax attention (a linear-attention recurrence the census does not know)",
                        )
                    return self._kernel(scores.q, scores.k, value, scores.dropout)
            if func in _DROPOUTS:
                p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
                training = args[2] if len(args) > 2 else kwargs.get("training", True)
                if training and p:
                    scores.dropout = float(p)
                return args[0]
            if func in _SOFTMAXES:
                scores.softmax = True
            with torch.no_grad(), attention._kernel_scope("attention"):
                out = func(*args, **kwargs)
            self._mark(out, scores)
            return out
        if func in _MATMULS and len(args) == 2 and self._is_score(*args):
            return self._score(args[0], args[1])
        if func in _BADDBMM:
            batch1 = args[1] if len(args) > 1 else kwargs.get("batch1")
            batch2 = args[2] if len(args) > 2 else kwargs.get("batch2")
            if self._is_score(batch1, batch2):
                with torch.no_grad(), attention._kernel_scope("attention"):
                    out = func(*args, **kwargs)
                self._mark(out, _Scores(batch1, batch2.transpose(-1, -2)))
                return out
        return func(*args, **kwargs)

    def _score(self, q, kt):
        with torch.no_grad(), attention._kernel_scope("attention"):
            out = torch.matmul(q, kt)
        self._mark(out, _Scores(q, kt.transpose(-1, -2)))
        return out

    def _sdpa(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, **_):
        out, _ = attention.speccat_attention(None, query, key, value, None, dropout=dropout_p, scaling=scale, is_causal=True)
        return out.transpose(1, 2)


@contextlib.contextmanager
def route_attention(seq_length: int) -> Iterator[AttentionRoute]:
    with AttentionRoute(seq_length) as mode:
        yield mode

