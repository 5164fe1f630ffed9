"""Per-expert token counts read as values, answered with the census's assumed routing: even loads.

Some routed experts are run by code that needs the router's counts as Python numbers: jetmoe's
router sums its top-k choices per expert and reads the sums with `.tolist()`, then splits the
experts' input by them (one `F.linear` per expert over its slice). Fake tensors have no values,
so that read cannot run. Where the experts interface runs, grouped_mm takes the counts as a
tensor and the bytes a layer keeps do not depend on how the slots fall among the experts; the
census states the same for code that reads the counts: it assumes even loads.

While probed layers holding stacked experts run (assumed_routing), a TorchFunctionMode watches every `topk`: its `k` and the slots it
chose (rows × k). A `.tolist()` of a fake 1-D integer tensor with one entry per candidate of the
last top-k (the per-expert counts the router made from its choices) is answered with those slots
split evenly: slots // n to every expert, one more to the first slots % n. Nothing else is
answered; any other data-dependent read still fails as before. The rule is by structure (a
top-k, then a count per candidate read as numbers), never by the model's name.

Other experts' code asks which experts the slots went to, and which slots each got:
longcat_flash's loops over the experts hit (a `nonzero` of a one-hot mask summed per expert,
each index read with `.item()`), and takes each one's slots with a one-argument `torch.where`
of its mask. Under the same assumption these are answered too (a mask: a fake boolean or
integer tensor): a `nonzero` of a mask with one entry per candidate of the last top-k is the
candidates that even loads give a slot (every one when there are at least as many slots as
candidates), as an int64 index (hits, 1) whose rows' `.item()` read their expert's index; a
one-argument `where` (a `nonzero` with `as_tuple`) of a mask with one entry per slot of the
last top-k, the first after such an index was read, is that expert's even count of positions
(one int64 index per dimension). The index tensors are fake (their values are never read; only the
expert indices are). Every candidate the router chooses among is counted, zero experts (which
hold no weights to compute with and pass the token on) included: a slot sent to one does no
matmul but still keeps what the model's own code keeps for it.

What the experts keep at those counts is what the real module keeps when its router sends the
tokens evenly: the slices of the experts' input are views of one storage, kept once whatever
their sizes (tests/test_census_jetmoe.py runs a real layer with its router forced to even loads).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.overrides import TorchFunctionMode

from speccat.census.structure.predicates import is_stacked_experts

_TOPK = {torch.topk, torch.Tensor.topk}
_UNBIND = {torch.unbind, torch.Tensor.unbind}
_NONZERO = {torch.nonzero, torch.Tensor.nonzero}
_ONE_HOT = {torch.nn.functional.one_hot}


def even_counts(slots: int, experts: int) -> list[int]:
    """`slots` split among `experts`: slots // experts each, one more to the first slots % experts."""
    base, extra = divmod(slots, experts)
    return [base + (i < extra) for i in range(experts)]


class EvenExpertCounts(TorchFunctionMode):
    """Answers the read of per-expert counts with even loads over the last top-k's slots. A fake
    tensor's `.tolist()` is Python code that unbinds the tensor and reads each element with
    `.item()`: the unbind of a counts tensor is noted, and each element's `.item()` answered."""

    def __init__(self):
        super().__init__()
        self.last: tuple[int, int] | None = None  # (candidates, slots) of the last top-k
        self.classes: int | None = None  # the classes of a one-hot of the last top-k's slots (as many as the candidates, or more)
        self.answers: dict[int, tuple[torch.Tensor, int]] = {}  # id of an unbound count or hit -> (it, kept alive; its value)
        self.hits: tuple[torch.Tensor, list[int]] | None = None  # the answered experts hit, kept alive; their indices
        self._hit_rows: list[torch.Tensor] = []  # the rows of the answered hits
        self.expert: int | None = None  # the expert whose index was read last

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.item and id(args[0]) in self.answers and self.answers[id(args[0])][0] is args[0]:
            value = self.answers[id(args[0])][1]
            if any(t is args[0] for t in self._hit_rows):
                self.expert = value
            return value
        if func is torch.Tensor.__getitem__ and len(args) == 2:
            indexed = self._read_index(args[0], args[1])
            if indexed is not None:
                return indexed
        answered = self._positions(func, args, kwargs)
        if answered is not None:
            return answered
        out = func(*args, **kwargs)
        dim0 = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) == 0
        if func in _UNBIND and dim0 and self.hits is not None and args[0] is self.hits[0]:
            self._hit_rows = list(out)
            self.answers = {id(t): (t, n) for t, n in zip(out, self.hits[1])}
        elif func in _UNBIND and self._counts(args[0]) and dim0:
            candidates, slots = self.last
            self.answers = {id(t): (t, n) for t, n in zip(out, even_counts(slots, candidates))}
        elif func in _TOPK:
            scores = args[0]
            k = args[1] if len(args) > 1 else kwargs["k"]
            dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
            candidates = int(scores.shape[dim])
            self.last = (candidates, scores.numel() // candidates * int(k))
            self.classes = None
        elif func in _ONE_HOT and self.last is not None and isinstance(out, torch.Tensor) and args[0].numel() == self.last[1]:
            self.classes = int(out.shape[-1])
        return out

    def _read_index(self, tensor, index) -> torch.Tensor | None:
        """An answered expert index (a row of the hits, or its one element) indexing a tensor is
        read as its value, as torch reads a 0-d integer index (dbrx's `expert_mask[expert_idx]`
        after `expert_idx = expert_idx[0]`); that element, taken from a hit row, is an answered
        index too. None for any other indexing."""
        answer = self.answers.get(id(index)) if isinstance(index, torch.Tensor) else None
        if answer is not None and answer[0] is index and any(t is index for t in self._hit_rows):
            self.expert = answer[1]
            return tensor[answer[1]]
        answer = self.answers.get(id(tensor))
        if answer is not None and answer[0] is tensor and any(t is tensor for t in self._hit_rows) and tensor.numel() == 1 and isinstance(index, int):
            element = tensor.__getitem__(index)
            self._hit_rows.append(element)
            self.answers[id(element)] = (element, answer[1])
            return element
        return None

    def _positions(self, func, args, kwargs) -> torch.Tensor | tuple[torch.Tensor, ...] | None:
        """The experts hit (a nonzero of a per-candidate mask), or the last read expert's slots
        (a one-argument where of a per-slot mask), at even loads; None for anything else."""
        if func is torch.where and len(args) + len(kwargs) == 1:
            as_tuple = True
        elif func in _NONZERO:
            as_tuple = bool(kwargs.get("as_tuple", False))
        else:
            return None
        mask = args[0] if args else next(iter(kwargs.values()))
        if not (isinstance(mask, FakeTensor) and not mask.dtype.is_floating_point and not mask.dtype.is_complex and self.last is not None):
            return None
        candidates, slots = self.last
        counts = even_counts(slots, candidates)
        if not as_tuple and mask.dim() == 1 and int(mask.shape[0]) in (candidates, self.classes):
            hit = [i for i, n in enumerate(counts) if n]  # a one-hot's classes beyond the candidates are never chosen
            self.hits = (torch.empty(len(hit), 1, dtype=torch.int64, device=mask.device), hit)
            self._hit_rows = []
            return self.hits[0]
        if as_tuple and mask.numel() == slots and self.expert is not None:
            n, self.expert = counts[self.expert], None  # one answer per index read
            return tuple(torch.empty(n, dtype=torch.int64, device=mask.device) for _ in range(max(mask.dim(), 1)))
        return None

    def _counts(self, t) -> bool:
        return (
            isinstance(t, FakeTensor)
            and self.last is not None
            and t.dim() == 1
            and not t.dtype.is_floating_point
            and not t.dtype.is_complex
            and t.dtype is not torch.bool
            and int(t.shape[0]) == self.last[0]
        )


def assumed_routing(layers: Iterable[nn.Module]) -> contextlib.AbstractContextManager:
    """EvenExpertCounts while layers holding stacked experts run (the only experts whose own code
    may read the counts: the experts interface takes them as a tensor); otherwise nothing, so
    that other layers' ops pass through no extra mode."""
    if any(is_stacked_experts(m) for layer in layers for m in layer.modules()):
        return EvenExpertCounts()
    return contextlib.nullcontext()
