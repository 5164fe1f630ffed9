"""The variant facts of the layer as a whole (docs/census.md, "Variant facts"): how often one
forward runs it so that it keeps its activations. Each reader is registered with `@variant`
(census/describe/variant_registry.py); its docstring is what docs/census.md's table says it is
read from.
"""

from __future__ import annotations

from speccat.census.describe.layer_roles import LayerRoles
from speccat.census.describe.variant_registry import variant


@variant
def recurrent_cycles(view: LayerRoles, top_k: int | None) -> int:
    """The layer's calls in the probe's forward that ran with grad (census/measure/watcher.py
    counts them; a call under torch.no_grad() keeps nothing and is not watched), when they ran
    alike (census/describe/layer_view.py `cycles`): hrm_text's L-module layers run in 6 cycles,
    3 of them with grad. The kind's op counts and its other facts are one call's, its measured
    bytes all of them. Calls that ran differently (inkling2_loop_text's passes) are stated as one: 1."""
    return view.cycles()
