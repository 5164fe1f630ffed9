"""Attention written outside transformers' attention interface, routed through speccat's kernel.

Most models dispatch attention through transformers' AttentionInterface, where `speccat` is
registered (census/kernels/attention.py). Others call `torch.nn.functional.scaled_dot_product_attention`
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
  and the dropout probability the eager code applied;
- a value matmul reached with no softmax between it and a square product q·kᵀ of n ≤ s rows
  ((…, n, d) by (…, d, n)) is a linear attention: scores (times a decay mask, or not) straight
  into the values, as a decayed linear attention written in blocks of n tokens computes within
  each block. No production kernel stands behind such torch code, so it runs as written, with
  autograd, and is measured as it runs; `on_linear` is told (q, k, v) of each such value
  matmul and whether its decay is gated (census/measure/watcher.py records the mixer): a decay mask that
  requires grad, computed from the tokens (xLSTM's mLSTM: its input and forget gates), where a
  constant decay (minimax's per-head slopes) does not. Products of s × s rows were taken for softmax
  scores and ran without autograd: their chain is run again, op by op, with autograd, before
  the value matmul, and so is the chain wherever else it is read afterwards (a normaliser's row
  sum over the scores: xLSTM's). Products of fewer rows are only followed (the ops run as written), through
  the ops whose result keeps their n × n shape (a decay mask, a scale): a softmax on them is
  blockwise softmax attention, which the kernel does not stand in for.

The bias or mask the eager code added (ALiBi, a sliding window as a mask) is not read: like
FlashAttention, the kernel keeps the same tensors whatever mask it applies.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from speccat.census.kernels import attention
from speccat.census.kernels.flash_attention import FLASH_ATTENTION
from speccat.census.kernels.scope import kernel_scope

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
    # s × s scores run without autograd until a value matmul shows what they are; then, without a
    # softmax, each tensor of the chain is remade from its recipe (func, args, kwargs) with autograd
    deferred: bool = True
    recipes: dict[int, tuple] = field(default_factory=dict)
    # the scores were combined with an n × n tensor that requires grad: a decay computed from the
    # tokens (xLSTM's input and forget gates), not a constant of the module (minimax's slopes)
    gated: bool = False
    # a value matmul showed the deferred scores are a linear attention's: every later op reading
    # the chain (xLSTM's normaliser sums the scores' rows) reads it remade with autograd (`made`)
    linear: bool = False
    made: dict[int, torch.Tensor] = field(default_factory=dict)


def _as_heads(x: torch.Tensor) -> torch.Tensor:
    """(…, s, d) as (b, heads, s, d): 3-D (b·heads, s, d) becomes (1, b·heads, s, d)."""
    if x.dim() == 4:
        return x
    return x.reshape(1, -1, *x.shape[-2:])


class AttentionRoute(TorchFunctionMode):
    """Routes SDPA calls and eager attention of the running layers to speccat's kernel."""

    def __init__(self, seq_length: int, on_linear: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], None] | None = None):
        super().__init__()
        self.seq = seq_length
        self.on_linear = on_linear
        self.marked: dict[int, tuple[torch.Tensor, _Scores]] = {}  # id → (tensor kept alive, its scores)
        # square products of fewer rows than s, followed as they run: id → (weak ref, their scores);
        # weak, so that nothing is kept alive that autograd would have freed
        self.followed: dict[int, tuple[weakref.ref, _Scores]] = {}

    # -- helpers ----------------------------------------------------------------------------

    def _mark(self, out, scores: _Scores, recipe: tuple | None = None) -> None:
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                if scores.deferred:
                    self.marked[id(t)] = (t, scores)
                    if recipe is not None and t is out:
                        scores.recipes[id(t)] = recipe
                else:
                    self.followed[id(t)] = (weakref.ref(t), scores)

    def _is_marked(self, t) -> bool:
        if not isinstance(t, torch.Tensor):
            return False
        if id(t) in self.marked:
            return self.marked[id(t)][0] is t
        return id(t) in self.followed and self.followed[id(t)][0]() is t

    def _scores_of(self, args, kwargs) -> _Scores | None:
        if not self.marked and not self.followed:  # no scores made yet: most calls of a forward
            return None
        for t in tree_flatten((args, kwargs))[0]:
            if self._is_marked(t):
                return (self.marked[id(t)] if id(t) in self.marked else self.followed[id(t)])[1]
        return None

    def _remade(self, t, scores: _Scores, made: dict[int, torch.Tensor]):
        """A tensor of a deferred chain made again with autograd, from its recipe (others as they are)."""
        if not isinstance(t, torch.Tensor) or id(t) not in scores.recipes:
            return t
        if id(t) not in made:
            func, args, kwargs = scores.recipes[id(t)]
            args, kwargs = (tree_map(lambda a: self._remade(a, scores, made), x) for x in (args, kwargs))
            made[id(t)] = func(*args, **kwargs)
        return made[id(t)]

    def _linear(self, func, scores: _Scores, weights, value):
        """The value matmul of a linear attention, with autograd (its chain remade when deferred)."""
        if scores.deferred:
            weights = self._remade(weights, scores, scores.made)
            scores.linear = True
            if scores.dropout:  # a dropout on the scores was passed over while they were taken for softmax's
                weights = F.dropout(weights, scores.dropout)
        if self.on_linear is not None:
            self.on_linear(scores.q, scores.k, value, scores.gated)
        return func(weights, value)

    def _note_gate(self, scores: _Scores, args, kwargs) -> None:
        """The scores meet a tensor of their n × n shape that requires grad: a gated decay."""
        n = scores.q.shape[-2]
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor) and not self._is_marked(t) and t.requires_grad and t.dim() >= 2 and tuple(t.shape[-2:]) == (n, n):
                scores.gated = True

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
        if attention.as_written_now():  # attention run as the model's eager code (census/kernels/attention.py)
            return func(*args, **kwargs)
        if func is F.scaled_dot_product_attention:
            return self._sdpa(*args, **kwargs)
        scores = self._scores_of(args, kwargs)
        if scores is not None:
            if func in _MATMULS and len(args) == 2 and self._is_marked(args[0]) and not self._is_marked(args[1]):
                value = args[1]
                if isinstance(value, torch.Tensor) and value.shape[-2] == scores.q.shape[-2]:
                    if not scores.softmax:
                        return self._linear(func, scores, args[0], value)
                    if scores.deferred:
                        return self._kernel(scores.q, scores.k, value, scores.dropout)
            self._note_gate(scores, args, kwargs)
            if scores.linear:  # a linear attention's chain read elsewhere: remade, with autograd
                args, kwargs = (tree_map(lambda a: self._remade(a, scores, scores.made), x) for x in (args, kwargs))
                return func(*args, **kwargs)
            if not scores.deferred:  # a square product of fewer rows: followed, run as written
                if func in _SOFTMAXES:
                    scores.softmax = True
                out = func(*args, **kwargs)
                if isinstance(out, torch.Tensor) and out.shape[-2:] == scores.q.shape[-2:-1] * 2:
                    self._mark(out, scores)  # followed through element-wise ops on the scores only
                return out
            if func in _DROPOUTS:
                p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
                training = args[2] if len(args) > 2 else kwargs.get("training", True)
                if training and p:
                    scores.dropout = float(p)
                return args[0]
            if func in _SOFTMAXES:
                scores.softmax = True
            with torch.no_grad(), kernel_scope(FLASH_ATTENTION.name):
                out = func(*args, **kwargs)
            self._mark(out, scores, (func, args, kwargs))
            return out
        if func in _MATMULS and len(args) == 2 and self._is_score(*args):
            return self._score(func, args[0], args[1])
        if func in _BADDBMM:
            batch1 = args[1] if len(args) > 1 else kwargs.get("batch1")
            batch2 = args[2] if len(args) > 2 else kwargs.get("batch2")
            if self._is_score(batch1, batch2):
                with torch.no_grad(), kernel_scope(FLASH_ATTENTION.name):
                    out = func(*args, **kwargs)
                self._mark(out, _Scores(batch1, batch2.transpose(-1, -2)), (func, args, kwargs))
                return out
        if func in _MATMULS and len(args) == 2 and self._is_square(*args):
            out = func(*args, **kwargs)
            self._mark(out, _Scores(args[0], args[1].transpose(-1, -2), deferred=False))
            return out
        return func(*args, **kwargs)

    def _score(self, func, q, kt):
        with torch.no_grad(), kernel_scope(FLASH_ATTENTION.name):
            out = func(q, kt)
        self._mark(out, _Scores(q, kt.transpose(-1, -2)), (func, (q, kt), {}))
        return out

    def _is_square(self, a, b) -> bool:
        """A product q·kᵀ of n rows each, 1 < n < s: block scores, followed as they run."""
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dim() >= 3
            and b.dim() >= 3
            and 1 < a.shape[-2] == b.shape[-1] < self.seq
            and a.shape[-1] == b.shape[-2] != a.shape[-2]
        )

    def _sdpa(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, **_):
        out, _ = attention.speccat_attention(None, query, key, value, None, dropout=dropout_p, scaling=scale, is_causal=True)
        return out.transpose(1, 2)


@contextlib.contextmanager
def route_attention(seq_length: int, on_linear: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], None] | None = None) -> Iterator[AttentionRoute]:
    with AttentionRoute(seq_length, on_linear) as mode:
        yield mode

