"""The variant facts of products with a per-channel scale (docs/census.md, "Variant facts";
census/measure/stream_scales.py): on the hidden stream, written in the layer's forward (doge's
scaled residuals, dory's residual rates), by the child they run after; inside the attention and
the dense MLP (dory's q times sqk², its MLP's projections' outputs times suv_gate and suv_up).
Each reader is registered with `@variant` (census/describe/variant_registry.py); its docstring
is what docs/census.md's table says it is read from.
"""

from __future__ import annotations

from speccat.census.describe.layer_roles import HALF, LayerRoles
from speccat.census.describe.variant_registry import variant


def _scaled_bytes(view: LayerRoles, children: set[str]) -> int:
    """Bytes per token and hidden channel the scaled factors booked after one of `children` keep,
    per call of the layer (`cycles`: its calls with grad)."""
    tokens, hidden = view.probe.tokens, view.probe.hidden_width
    if not tokens or not hidden:
        return 0
    kept = sum(n for op, n in view.probe.stream_scale_kept.items() if op in {f"child:{child}" for child in children})
    return view.per_call(kept // (tokens * hidden))


def _channel_scaled(view: LayerRoles, children: set[str]) -> int:
    """Elements per token, in a half dtype (the compute dtype), of the factors products with a
    per-channel scale kept inside one of `children`, per call of the layer."""
    ops = {f"child:{child}" for child in children}
    kept = sum(n // dtype.itemsize for (op, dtype), n in view.probe.channel_scale_kept.items() if op in ops and dtype in HALF)
    return view.per_call(kept // view.probe.tokens) if view.probe.tokens else 0


@variant
def stream_scale_attn_bytes(view: LayerRoles, top_k: int | None) -> int:
    """What the layer's own products of a hidden-width tensor with a per-channel scale (a
    parameter, or a vector computed from parameters alone) keep after the attention's child
    (census/measure/stream_scales.py): the factors' bytes per token and hidden channel, per
    call, where that product saved them first (doge's `input_residual * residual` keeps the bf16
    residual, 2; dory's `abs(λ₁·scale) * (out − h)` the bf16 difference, 2); 0 without such a product."""
    return _scaled_bytes(view, view.mixer_children)


@variant
def stream_scale_ff_bytes(view: LayerRoles, top_k: int | None) -> int:
    """The same after the feed-forward's children (doge's `post_attention_residual * residual`, 2;
    dory's `abs(λ₂·scale) * (out − h)`, 2)."""
    return _scaled_bytes(view, view.ffn_children)


@variant
def attn_scaled_kept(view: LayerRoles, top_k: int | None) -> int:
    """Products with a per-channel scale (a parameter, or a tensor computed from parameters
    alone, that needs a gradient) inside the children where a softmax attention kernel ran,
    outside their norms and their output gate's chain (census/measure/stream_scales.py): the
    elements per token, in a half dtype, of the factors each product saved first, per call
    (dory's q after rope times sqk²: heads × head_dim; not doge's softplus of dt_proj's output
    times A, on a mask the flash kernel does not take, freed unkept); 0 without one. Other
    mixers' products (RWKV's token mixes, the RG-LRU's gate times softplus of its parameter) are
    their own records'."""
    return _channel_scaled(view, {k.child for k in view.attention_kernels() if k.child})


@variant
def ff_scaled_kept(view: LayerRoles, top_k: int | None) -> int:
    """The same inside the dense feed-forward's children: tensors of the dense MLP's width
    (`intermediate_size`) a token, per call (dory's gate_proj and up_proj outputs times suv_gate
    and suv_up: 2); 0 without a dense MLP or such a product."""
    width = view.dense_width()
    return _channel_scaled(view, view.ffn_children) // width if width else 0
