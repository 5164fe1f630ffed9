"""Storages several switched ops keep together (docs/census.md, "Storages several ops keep").

A storage is booked once, to the op of its first saver still alive (census/measure/booking.py).
Where savers of two or more ops keep it and each of those ops has a recompute switch (persimmon's
QK-LayerNorms keep views of the fused q/k/v projection's output, and the attention kernel keeps
v, a view of the same storage), recomputing one of them frees nothing: the others still hold
the storage. It is freed only when every op keeping it is recomputed. This notes such a storage
on the probe (`LayerProbe.kept_jointly`), and the ops keeping it, which the selective-checkpoint
policy of census/measure/recompute.py reads through `kept_by_call`: the call that made it is
saved unless every one of them is recomputed.

A storage made inside a norm (an MLA latent norm's, which its up-projection keeps too: axk2's)
is dropped with the norm, whose recompute reruns the call that made it, as booked. A storage one of whose keepers has no switch (an op only full recompute drops: a projection's
input) is left as booked: no switch set frees it while that op keeps it, and the census's
selective-checkpoint view of it (the call rerun with its first saver's op) is the records'.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from torch import nn

from speccat.catalogue.shared import switch_drops
from speccat.census.measure.layer_probe import LayerProbe
from speccat.census.structure.predicates import is_norm


@cache
def _switched() -> frozenset[str]:
    """The ops and parts some recompute switch drops (catalogue/shared.yaml)."""
    return frozenset().union(*switch_drops().values())


def joint_keepers(savers: Iterable[tuple]) -> frozenset[str]:
    """The ops (or parts) of the savers still alive of one storage when they are two or more and
    each has a switch, else the empty set. `savers` are the watcher's (probe, op, bytes, holder
    ref, part) tuples."""
    ops = frozenset(part or op for _, op, _, held, part in savers if held() is not None)
    return ops if len(ops) > 1 and ops <= _switched() else frozenset()


def made_in_norm(layer: nn.Module, made) -> bool:
    """The storage was made inside a norm (the watcher's Made): by the code of normOp, which
    recomputing reruns, so it is dropped with the norm as booked (axk2's MLA latent norms)."""
    if made.nested_norm:
        return True
    try:
        return made.module is not None and is_norm(layer.get_submodule(made.module))
    except AttributeError:
        return False


def note_joint(probe: LayerProbe, key: int, savers: Iterable[tuple], layer: nn.Module, made) -> frozenset[str]:
    """Note the storage `key` (made by `made`, in `layer`) on `probe` when switched ops keep it
    together and no norm made it; the ops keeping it (empty when it is no such storage), which
    the call that made it is kept for."""
    keepers = frozenset() if made_in_norm(layer, made) else joint_keepers(savers)
    if keepers:
        probe.kept_jointly[key] = keepers
    return keepers
