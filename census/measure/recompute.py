"""Probing under selective recompute, through torch's selective-checkpoint API (docs/census.md,
"Measured across settings").

A switch set names ops whose saves are dropped and recomputed in backward. The census measures
what a layer then keeps by running its forward again inside `torch.utils.checkpoint` with a
selective-checkpoint policy built from the plain probe of the same layer:

- a call that made a storage plain autograd keeps for a named op is recomputed (MUST_RECOMPUTE);
- a call that made a storage plain autograd keeps for any other op is saved (MUST_SAVE): a
  call's whole output is cached, so a kernel whose outputs serve two ops (the flash kernel's
  output and its log-sum-exp) is saved while one of them is not recomputed;
- every other call is recomputed (PREFER_RECOMPUTE): plain autograd keeps nothing it made.

What the layer keeps is then what the policy's cache holds after the forward: the outputs of
the saved calls whose storages are still alive, the layer's output left out. An output plain
autograd does not keep (a kernel's result beside the intermediates it saves) is booked to the
op `cached`: the API's cost, which the records do not price. The checkpoint
also keeps the layer's inputs, at every point alike; that copy is left out, and what plain
autograd kept of the layer's own input (a LayerNorm's input) counts while its op is not
recomputed, as the records price it. The calls are matched to the
plain probe's by position and checked op by op; a layer whose ops differ is not measured.

Every switch set is measured from one forward: it runs the policy of the ops all the sets
recompute, which saves every call any set saves, and each set's cache is then that cache less
the calls the set recomputes. What is saved changes nothing the forward computes, and a saved
call's storages stay alive to the end, held by the cache, whichever set is counted.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections import Counter
from collections.abc import Iterator
import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_leaves
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from speccat.catalogue.vocabulary import CACHED
from speccat.census.build.model import Built
from speccat.census.measure.layer_probe import LayerProbe
from speccat.census.measure.probe import run_layers
from speccat.census.measure.watcher import Watcher


class Recomputing(Watcher):
    """A Watcher that also decides, call by call, what the selective-checkpoint policy saves,
    and notes the storages of the saved calls."""

    def __init__(self, layers: dict[int, nn.Module], excluded_storages: set[int], plain: dict[int, LayerProbe], policies: list[frozenset[str]]):
        super().__init__(layers, excluded_storages)
        self.plain = plain
        self.policies = policies
        self.ops = frozenset.intersection(*policies)  # what every policy recomputes: the run's own policy
        self.position: Counter = Counter()  # layer index -> calls the policy has seen
        # (storage, its key, bytes, probe, op, what plain autograd kept of the call's storages)
        self.cached: list[tuple[StorageWeakRef, int, int, LayerProbe, str, set[str]]] = []
        self.mismatch: set[int] = set()  # layers whose calls differ from the plain probe's
        self.counted: list[dict[int, LayerProbe]] = []

    def policy(self, ctx, func, *args, **kwargs) -> CheckpointPolicy:
        """Called by the selective-checkpoint mode after each op ran (its output: ctx.op_output)."""
        probe = self.current
        if ctx.is_recompute or probe is None:
            return CheckpointPolicy.PREFER_RECOMPUTE
        plain = self.plain.get(probe.index)
        if plain is None:  # a layer run only so that the probed ones can (the keys and values a reader reads: census/measure/readers.py), not measured here
            self.mismatch.add(probe.index)
            return CheckpointPolicy.PREFER_RECOMPUTE
        i = self.position[probe.index]
        self.position[probe.index] += 1
        if i >= len(plain.calls) or plain.calls[i] is not func:
            self.mismatch.add(probe.index)
            return CheckpointPolicy.PREFER_RECOMPUTE
        booked = plain.kept_by_call.get(i)
        if not booked:
            return CheckpointPolicy.PREFER_RECOMPUTE
        if booked <= self.ops:
            return CheckpointPolicy.MUST_RECOMPUTE
        op = plain.booked_as[i]
        for tensor in tree_leaves(ctx.op_output):
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                self.cached.append((StorageWeakRef(storage), storage._cdata, storage.nbytes(), probe, op, booked))
        return CheckpointPolicy.MUST_SAVE

    def count(self) -> None:
        """Per policy (`counted`, in the order of `policies`), what the cache would still hold
        after the forward (and gc), booked to a copy of each probe's saved bytes; the layers
        whose calls differ are left out.

        The run saved every call some policy saves, so a policy's cache is the run's less the
        calls it recomputes: the forward is the same whatever is saved, and a cached storage is
        alive to the end either way (its cache entry holds it), its identity its own.
        """
        self.counted = [self._count(ops) for ops in self.policies]

    def _count(self, ops: frozenset[str]) -> dict[int, LayerProbe]:
        probes = {index: copy.copy(probe) for index, probe in self.probes.items() if index not in self.mismatch}
        for probe in probes.values():
            probe.saved_bytes = Counter()
        seen: set[int] = set()
        for ref, key, nbytes, probe, op, booked in self.cached:
            if booked <= ops or ref.expired() or key in seen or key in self.outputs or probe.index in self.mismatch:
                continue
            seen.add(key)
            made = self.creator.get(key)
            if made is not None and made.probe is probe and made.position not in self.plain[probe.index].kept_outputs.get(made.call, ()):
                op = CACHED  # calls match the plain probe's by position, so (call, output) names the same tensor
            probes[probe.index].saved_bytes[op] += self.cuda_nbytes.get(key, nbytes)  # a mask is known as one only once filled
        for index, probe in probes.items():
            for op, nbytes in self.plain[index].input_bytes.items():
                if op not in ops:
                    probe.saved_bytes[op] += nbytes
        return probes


@contextlib.contextmanager
def checkpointed(layers: dict[int, nn.Module], watcher: Recomputing) -> Iterator[None]:
    """Run each layer's forward inside a non-reentrant checkpoint with the watcher's policy."""
    context = functools.partial(create_selective_checkpoint_contexts, watcher.policy)
    try:
        for layer in layers.values():
            forward = layer.forward
            layer.forward = functools.partial(checkpoint, forward, use_reentrant=False, context_fn=context)
        yield
    finally:
        for layer in layers.values():
            del layer.forward  # the instance attribute; the class's forward shows again


def probe_recomputed(
    built: Built, indices: list[int], seq_length: int, plain: dict[int, LayerProbe], policies: list[frozenset[str]], encoder_tokens: int = 0
) -> list[dict[int, LayerProbe]]:
    """What the layers `indices` keep when the ops of each of `policies` are recomputed (their
    plain probes: `plain`, run with the same `encoder_tokens`), one forward for all of them.

    A layer whose calls differ from its plain probe's is left out.
    """
    if not policies:
        return []
    watcher = run_layers(
        built, indices, seq_length, functools.partial(Recomputing, plain=plain, policies=policies), around=checkpointed, encoder_tokens=encoder_tokens
    )
    return watcher.counted
