"""What the watcher notes of an op besides its call, by op: the functions each op is handed to,
in the order they run, each from the module of its topic.

A note is called as `note(watcher, probe, func, args, kwargs, out)` after the op ran (outside a
registered kernel's own op, census/measure/watcher.py `Watcher.on_op`), with the layer's probe;
it decides itself whether the op is one it notes. A new quirk of how some architecture's code
runs goes in its topic's module, and here when it notes another op.
"""

from __future__ import annotations

from collections.abc import Callable

from speccat.census.measure import cuda_widths, dropouts, eager_scores, inline_activations, input_products, kernel_fallback, param_casts, repeated_attention, score_gathers, sigmoid_gates, stream_scales, token_shift

OP_NOTES: dict[object, tuple[Callable[..., None], ...]] = {
    kernel_fallback.CONVOLUTION: (kernel_fallback.note_convolution,),
    score_gathers.GATHER_OP: (score_gathers.note_score_gather,),
    **{op: (inline_activations.note_inline_activation,) for op in inline_activations.INLINE_ACTIVATIONS},
    **{op: (dropouts.note_dropout,) for op in dropouts.DROPOUT_OPS},
    **{op: (cuda_widths.note_empty_on_cuda,) for op in cuda_widths.EMPTY_ON_CUDA},
    **{op: (cuda_widths.note_layer_norm_stats,) for op in cuda_widths.LAYER_NORM_OPS},
    token_shift.TOKEN_SHIFT_OP: (token_shift.note_token_shift,),
    token_shift.TOKEN_MIX_OP: (token_shift.note_token_mix, input_products.note_input_product, sigmoid_gates.note_gated_product, stream_scales.note_stream_scale),
    sigmoid_gates.SIGMOID_OP: (sigmoid_gates.note_sigmoid,),
    param_casts.CAST_OP: (param_casts.note_param_cast, eager_scores.note_cast),
    repeated_attention.CAT_OP: (repeated_attention.note_join,),
    **{op: (eager_scores.note_softmax,) for op in eager_scores.SOFTMAX_OPS},
}
