"""The variant facts of the layer as a whole (docs/census.md, "Variant facts"): how often one
forward runs it so that it keeps its activations, what its calls after the first ran beyond
the first's (children only they ran, stream norm calls beyond the first's: inkling2_loop_text's
later passes), and what its attentions over the stack's depth attend over. Each reader is
registered with `@variant` (census/describe/variant_registry.py); its docstring is what
docs/census.md's table says it is read from.
"""

from __future__ import annotations

from collections import Counter

import torch

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


def _later_children(view: LayerRoles) -> set[str]:
    """The top-level children that ran in a call after the first and not in the first
    (LayerProbe.call_children), where those calls count as the layer's (`recurrent_cycles`: each
    ran the first call's ops among more of its own): inkling2_loop_text's message gates, which
    mix the previous pass's messages in. None where the calls ran alike or once."""
    each = view.probe.call_children
    if view.cycles() < 2 or len(each) < 2:
        return set()
    return set().union(*each[1:]) - each[0]


@variant
def later_child_calls(view: LayerRoles, top_k: int | None) -> int:
    """The calls after the first that ran children the first did not run, one for each such
    child a call ran (LayerProbe.call_children): inkling2_loop_text's four message gates in each
    of the passes after the first (2 more at its default: 8); 0 where the calls ran alike or once."""
    later = _later_children(view)
    return sum(len(children & later) for children in view.probe.call_children[1:])


def _later_kept(view: LayerRoles, fp32: bool) -> int:
    """The elements per token that those children keep in their own code and modules, booked to
    them (census/measure/kept_modules.py), per call (`later_child_calls`): fp32 ones (`fp32`),
    else those of a 2-byte float dtype (the compute dtype's)."""
    later = _later_children(view)
    calls = later_child_calls(view, None)
    if not calls:
        return 0
    ops = {f"child:{child}" for child in later}
    kept = sum(
        n for (op, _, _, _, dtype), n in view.probe.kept_modules.items()
        if op in ops and (dtype == torch.float32 if fp32 else dtype.is_floating_point and dtype.itemsize == 2)
    )  # fmt: skip
    return kept // calls


@variant
def later_kept_fp32(view: LayerRoles, top_k: int | None) -> int:
    """Of those children: the fp32 elements per token each call keeps (census/measure/kept_modules.py):
    inkling2_loop_text's message gate, three rows of the hidden width (its two tanh outputs and
    1 - forget) and its forget and message projections' one input, `loop_gate_rank` wide; 0 without them."""
    return _later_kept(view, fp32=True)


@variant
def later_kept_half(view: LayerRoles, top_k: int | None) -> int:
    """Of those children: the compute-dtype elements per token each call keeps: inkling2_loop_text's
    message gate, its down projection's input (the normalised hidden states and message side by
    side, 2 × hidden); 0 without them."""
    return _later_kept(view, fp32=False)


def _norms_by_call(view: LayerRoles) -> list[list[tuple[str, int]]]:
    """Each call's stream norm calls (LayerProbe.stream_norms split where each call began:
    `call_norm_starts`), of calls counted as the layer's; none where they ran alike or once."""
    return [] if view.cycles() < 2 or view.ran_alike else view.probe.norms_by_call()


def _later_norm_paths(view: LayerRoles) -> Counter:
    """The stream norms' calls in the calls after the first beyond the first call's own, by path."""
    each = _norms_by_call(view)
    first = Counter(path for path, _ in each[0]) if each else Counter()
    return sum((Counter(path for path, _ in call) - first for call in each[1:]), Counter())


@variant
def later_norm_calls(view: LayerRoles, top_k: int | None) -> int:
    """The stream norm calls the calls after the first ran beyond the first's, summed over them,
    one statistic a token each: inkling2_loop_text's message gates' two weightless norms each, and
    a sliding layer's attention input norm run on q's, k's and v's gated inputs (2 more a pass:
    10, 8 in a full layer); 0 where the calls ran alike or once."""
    return sum(_later_norm_paths(view).values())


@variant
def later_norm_scaled(view: LayerRoles, top_k: int | None) -> int:
    """Of those calls, the calls of norms that hold a weight, each keeping its normalised input
    for the weight to multiply (inkling2_loop_text's sliding layers' attention input norm: 2 a
    pass after the first); 0 for the others."""
    return sum(n for path, n in _later_norm_paths(view).items() if getattr(view.module(path), "weight", None) is not None)


@variant
def later_norm_inputs(view: LayerRoles, top_k: int | None) -> int:
    """The storages the stream norms of each call after the first read beyond as many as the
    first's read (each a norm input kept once, the hidden width a token), summed over those calls:
    inkling2_loop_text's norms after the message gates read the gates' outputs (4 a pass after the
    first), where the first pass's read the depth attentions' outputs, which the gates' norms
    keep; not the tensors a call was given beside its hidden states, which it does not keep
    (LayerProbe.call_inputs: the messages the gates' norms read); 0 where the calls ran alike or once."""
    each = _norms_by_call(view)
    kept = [{key for _, key in call} - given for call, given in zip(each, view.probe.call_inputs)]
    return sum(len(call) - len(kept[0]) for call in kept[1:])
