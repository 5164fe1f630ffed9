"""The variant facts of the layer as a whole (docs/census.md, "Variant facts"): how often one
forward runs it so that it keeps its activations, and what its attentions over the stack's depth
attend over. Each reader is registered with `@variant`
(census/describe/variant_registry.py); its docstring is what docs/census.md's table says it is
read from.
"""

from __future__ import annotations

from speccat.census.describe.layer_roles import LayerRoles
from speccat.census.describe.variant_registry import variant


@variant
def recurrent_cycles(view: LayerRoles, top_k: int | None) -> int:
    """The layer's calls in the probe's forward that ran with grad (census/measure/watcher.py
    counts them; a call under torch.no_grad() keeps nothing and is not watched), when each ran
    the first call's ops in their order (census/describe/layer_view.py `cycles`): alike (hrm_text's
    L-module layers run in 6 cycles, 3 of them with grad), or later calls running more beside them
    (inkling2_loop_text's looped layers: 3 passes, each after the first mixing the previous one's
    messages in). The kind's op counts and its other facts are the first call's, its measured
    bytes all of them. Calls that ran otherwise are stated as one: 1."""
    return view.cycles()


@variant
def depth_states(view: LayerRoles, top_k: int | None) -> int:
    """The layer's attentions over the stack's depth run as written (census/kernels/attention.py,
    told to the probe: LayerProbe.depth_calls): the states each attended over per token (its keys:
    the stored block states and the partial one), summed over one call's (`per_call`): inkling2's
    attention input and MLP input, each over the blocks stored before the layer and the partial
    block (one more for a block boundary's MLP input); 0 without one."""
    return view.per_call(sum(states for states, _ in view.probe.depth_calls))


@variant
def depth_scores(view: LayerRoles, top_k: int | None) -> int:
    """Of those attentions: the scores each made per token, its states times its learned queries
    (inkling2's full layer's attention input: 3 queries, one each for q's, k's and v's input),
    summed over one call's; 0 without one."""
    return view.per_call(sum(states * queries for states, queries in view.probe.depth_calls))
