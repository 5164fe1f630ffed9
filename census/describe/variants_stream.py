"""The variant facts of the layer's own code on its hidden stream (docs/census.md, "Variant
facts"): products of the stream with a per-channel parameter written in the layer's forward
(census/measure/stream_scales.py: doge's scaled residuals), by the child they run after. Each
reader is registered with `@variant` (census/describe/variant_registry.py); its docstring is
what docs/census.md's table says it is read from.
"""

from __future__ import annotations

from speccat.census.describe.layer_roles import LayerRoles
from speccat.census.describe.variant_registry import variant


def _scaled_bytes(view: LayerRoles, children: set[str]) -> int:
    """Bytes per token and hidden channel the scaled factors booked after one of `children` keep."""
    tokens, hidden = view.probe.tokens, view.probe.hidden_width
    if not tokens or not hidden:
        return 0
    kept = sum(n for op, n in view.probe.stream_scale_kept.items() if op in {f"child:{child}" for child in children})
    return kept // (tokens * hidden)


@variant
def stream_scale_attn_bytes(view: LayerRoles, top_k: int | None) -> int:
    """What the layer's own products of a hidden-width tensor with a per-channel parameter keep
    after the attention's child (census/measure/stream_scales.py): the factors' bytes per token
    and hidden channel, where that product saved them first (doge's `input_residual * residual`
    keeps the bf16 residual, 2); 0 without such a product."""
    return _scaled_bytes(view, view.mixer_children)


@variant
def stream_scale_ff_bytes(view: LayerRoles, top_k: int | None) -> int:
    """The same after the feed-forward's children (doge's `post_attention_residual * residual`, 2)."""
    return _scaled_bytes(view, view.ffn_children)
