"""speccat's attention in transformers: the attention function and its mask, registered in
transformers' interfaces, and attention run as the model's own eager code where no kernel stands
for it.

`speccat` is registered once in transformers' AttentionInterface (and its mask in the
AttentionMaskInterface), as transformers intends custom attention to be plugged in. It calls
the `speccat::flash_attention` op (census/kernels/flash_attention.py) with K/V heads
unexpanded, in that kernel's scope (census/kernels/scope.py), so the census can tell the
tensors the kernel keeps from the rest. Attention run as written runs in scopes of its own
(`EAGER_ATTENTION`, `DEPTH_ATTENTION`).
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

from speccat.census.kernels.flash_attention import FLASH_ATTENTION, flash_attention
from speccat.census.kernels.scope import kernel_scope
from speccat.census.structure.predicates import is_learned_query_attention
from speccat.census.spec import SpecError

# The name registered with transformers; it must not contain "flash", "sdpa" or "flex", which
# transformers reads as requests for its own kernels.
ATTENTION_IMPL = "speccat"

# The scopes attention run as the model's eager code runs in (`_as_written`): a softmax attention
# (census/measure/watcher.py books its probabilities to softmax, the rest to attBMM), and an
# attention over the stack's depth with learned queries (booked to other)
EAGER_ATTENTION = "eager_attention"
DEPTH_ATTENTION = "depth_attention"
# While attention runs as the model's eager code (see `_as_written`): census/kernels/routing.py leaves it be
_AS_WRITTEN: ContextVar[bool] = ContextVar("speccat_as_written", default=False)
# Told (q, k, v, window, causal, biased) of each self-attention run as written, while a probe watches
_ON_EAGER: ContextVar[Callable | None] = ContextVar("speccat_on_eager", default=None)
# Told (q, k) of each attention over the stack's depth run as written, while a probe watches
_ON_DEPTH: ContextVar[Callable | None] = ContextVar("speccat_on_depth", default=None)
# Tensor inputs a model may pass through the attention interface that change nothing the kernel
# computes: the positions (already applied to q and k by the rotary embedding).
POSITIONAL_INPUTS = frozenset({"position_ids"})
_SEEDS = random.Random(0x5EED)  # dropout seeds, from a generator of our own (no global RNG state touched)


def as_written_now() -> bool:
    """Attention is running as the model's own eager code: nothing routes it (census/kernels/routing.py)."""
    return _AS_WRITTEN.get()


@contextlib.contextmanager
def eager_seen(callback: Callable, on_depth: Callable | None = None) -> Iterator[None]:
    """`callback(q, k, v, window, causal, biased)` is told of each self-attention run as written
    (`biased`: given an additive score bias, `_score_bias`), and
    `on_depth(q, k)` of each attention over the stack's depth."""
    token, depth_token = _ON_EAGER.set(callback), _ON_DEPTH.set(on_depth)
    try:
        yield
    finally:
        _ON_DEPTH.reset(depth_token)
        _ON_EAGER.reset(token)


def speccat_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    s_aux: torch.Tensor | None = None,
    indices: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention as a flash kernel computes it: q (b, h, s, d), k/v (b, kv_heads, t, d) → (b, s, h, dv).

    An additive score bias the model passes as a tensor keyword (inkling's `position_bias`: one
    score per head, query and key, see `_score_bias`) is the kernel's `bias`, as transformers'
    SDPA path hands it to torch's memory-efficient kernel inside a float mask.

    Per-query sinks (inkling2's) and an attention over something other than the sequence with
    learned queries (inkling2's over the stack's depth) run as the model's own eager code instead
    (`_as_written`): no kernel stands for them, and the model supports none.

    The mask is not read: causality (the module's `is_causal`, true when it states none, except
    for keys of another length than the queries: a cross-attention's encoder states), the
    sliding window, softcapping, sinks (`s_aux`) and sparse `indices` are the kernel's own
    arguments, as they are for FlashAttention.
    """
    if _learned_queries(module) or _per_query_sinks(query, key, kwargs) is not None:
        given = {"dropout": dropout, "scaling": scaling, "sliding_window": sliding_window, "softcap": softcap, "is_causal": is_causal, "s_aux": s_aux, "indices": indices}
        return _as_written(module, query, key, value, attention_mask, {**{k: v for k, v in given.items() if v is not None}, **kwargs})
    bias = _score_bias(query, key, kwargs)
    _refuse_unknown_inputs(module, {name: value for name, value in kwargs.items() if value is not bias})
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if is_causal is None and not hasattr(module, "is_causal") and key.shape[2] != query.shape[2]:
        causal = False  # keys of another length and no causal flag stated: a cross-attention to encoder states sees them all
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    seed = _SEEDS.getrandbits(62) if dropout else 0
    with kernel_scope(FLASH_ATTENTION.name):
        out, _ = flash_attention(
            query, key, value, s_aux, indices, float(scale), bool(causal), int(sliding_window or 0), float(softcap or 0.0), float(dropout), seed, bias
        )
    return out, None


def _score_bias(query: torch.Tensor, key: torch.Tensor, kwargs: dict) -> torch.Tensor | None:
    """The one floating tensor keyword shaped as scores, (b or 1, heads or 1, s, t): an additive
    score bias (inkling's relative position bias), told by its shape, not its name; None when
    there is none. Two such tensors are left to `_refuse_unknown_inputs`."""
    b, heads, s = query.shape[:3]
    t = key.shape[2]
    found = _floating_4d(kwargs, lambda shape: tuple(shape[2:]) == (s, t) and shape[0] in (1, b) and shape[1] in (1, heads))
    return found[0] if len(found) == 1 else None


def _floating_4d(kwargs: dict, fits) -> list[torch.Tensor]:
    """The floating 4-D tensor keywords whose shape `fits`."""
    return [v for v in kwargs.values() if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() == 4 and fits(v.shape)]


def _learned_queries(module: torch.nn.Module | None) -> bool:
    """The caller is an attention over something other than the sequence, with learned queries
    (census/structure/predicates.py `is_learned_query_attention`: inkling2's attention over the stack's depth)."""
    return module is not None and is_learned_query_attention(module)


def _per_query_sinks(query: torch.Tensor, key: torch.Tensor, kwargs: dict) -> torch.Tensor | None:
    """A floating tensor keyword of one logit per head and query, (b or 1, heads, s, 1), beside
    keys of more than one token: sinks per query (inkling2's, projected from each token), which
    take probability mass without a value. No kernel takes them (FlashAttention's and SDPA's
    sinks are per head); None when there are none."""
    b, heads, s = query.shape[:3]
    if key.shape[2] <= 1:
        return None
    found = _floating_4d(kwargs, lambda shape: tuple(shape[1:]) == (heads, s, 1) and shape[0] in (1, b))
    return found[0] if found else None


def _as_written(module: torch.nn.Module, query, key, value, attention_mask, kwargs: dict) -> tuple[torch.Tensor, None]:
    """The attention as the model's own eager code computes it (`eager_attention_forward` of the
    module's modeling file, the function transformers' attention interface falls back to), with
    autograd, routed nowhere: what it keeps is what training through transformers keeps, as the
    model supports no fused kernel for it. Each call is told to the probe (`eager_seen`)."""
    eager = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if eager is None:
        _refuse_unknown_inputs(module, kwargs)
        raise SpecError("unsupported_layer", f"{type(module).__name__}: its attention runs only as its own eager code, which its module does not name")
    learned = _learned_queries(module)
    if not learned and (callback := _ON_EAGER.get()) is not None:
        causal = getattr(module, "is_causal", True)
        callback(query, key, value, int(kwargs.get("sliding_window") or 0), bool(causal), _score_bias(query, key, kwargs) is not None)
    if learned and (on_depth := _ON_DEPTH.get()) is not None:
        on_depth(query, key)
    token = _AS_WRITTEN.set(True)
    try:
        with kernel_scope(DEPTH_ATTENTION if learned else EAGER_ATTENTION):
            out, _ = eager(module, query, key, value, attention_mask, **kwargs)
    finally:
        _AS_WRITTEN.reset(token)
    return out, None


def _refuse_unknown_inputs(module: torch.nn.Module, kwargs: dict) -> None:
    """A tensor the kernel does not take would be dropped without a word, and the attention
    computed (and priced) without it: a second score bias, say. Refused instead (per-query sinks
    run as the model's eager code: `_as_written`)."""
    unknown = sorted(name for name, value in kwargs.items() if isinstance(value, torch.Tensor) and name not in POSITIONAL_INPUTS)
    if unknown:
        raise SpecError(
            "unsupported_layer",
            f"{type(module).__name__}: its attention passes the tensor {', '.join(unknown)}, which speccat's flash kernel does not take "
            "(no kernel speccat models computes it)",
        )


def speccat_attention_mask(*args, **kwargs):
    """A 4-D boolean causal mask, always materialised: some layers read it (DeepSeek-V3.2's indexer)."""
    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def register() -> None:
    """Register speccat's attention and mask with transformers (idempotent)."""
    AttentionInterface.register(ATTENTION_IMPL, speccat_attention)
    if ATTENTION_IMPL not in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionMaskInterface.register(ATTENTION_IMPL, speccat_attention_mask)


register()
