"""The inverse questions of `speccat fit` (docs/planning.md): the longest sequence, the
largest micro-batch and the fewest GPUs at which some (layout, switch set) fits. Steps and
limits are data (inverse.yaml).

Each search asks `fits_at(value)` (the rows that fit, flows/fit_engine.py `fits`, at that value) and relies on
what the prices guarantee: a rank's bytes grow with the sequence length and the micro-batch
(activations and ends are polynomials in s and b with non-negative terms; the states do not
change), so what fits at a value fits at every smaller one, and the largest value that fits is
found by doubling, then bisecting, at the step. GPU counts are not ordered that way (7 GPUs
allow fewer layouts than 4), but a layout of n GPUs that fits also fits as k·n GPUs with dp
k times larger (its stages hold no more): the search doubles from 1 to the first power of two
that fits, then tries every count between the last power that did not and that one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from speccat.catalogue.datafile import Loader, read_yaml
from speccat.catalogue.records.states import StatesError

INVERSE_PATH = Path(__file__).with_name("inverse.yaml")


@dataclass(frozen=True)
class Bounds:
    seq_step: int
    seq_limit: int
    micro_batch_step: int
    micro_batch_limit: int
    gpus_limit: int


@dataclass(frozen=True)
class Answer:
    value: int | None  # None: nothing fits even at the smallest value tried
    rows: Sequence  # the fits at `value`
    limited: bool  # the value is the limit: larger ones were not tried
    tried: int  # how many values were priced


class _Loader(Loader):
    error = StatesError

    def positive(self, key: str, value) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise self.fail("bad_value", key, f"must be a whole number >= 1, got {value!r}")
        return value


@cache
def load_bounds(path: Path = INVERSE_PATH) -> Bounds:
    loader = _Loader(path.name)
    top = loader.mapping("", read_yaml(path, lambda reason, what: loader.fail(reason, "", what)), ("max_seq", "max_micro_batch", "min_gpus"), ("max_seq", "max_micro_batch", "min_gpus"))
    seq = loader.mapping("max_seq", top["max_seq"], ("step", "limit"), ("step", "limit"))
    mb = loader.mapping("max_micro_batch", top["max_micro_batch"], ("step", "limit"), ("step", "limit"))
    gpus = loader.mapping("min_gpus", top["min_gpus"], ("limit",), ("limit",))
    return Bounds(loader.positive("max_seq.step", seq["step"]), loader.positive("max_seq.limit", seq["limit"]),
                  loader.positive("max_micro_batch.step", mb["step"]), loader.positive("max_micro_batch.limit", mb["limit"]),
                  loader.positive("min_gpus.limit", gpus["limit"]))  # fmt: skip


def largest(fits_at: Callable[[int], Sequence], step: int, limit: int) -> Answer:
    """The largest multiple of `step`, at most `limit`, at which `fits_at` lists a row: by
    doubling (step, 2·step, 4·step, ...) to the first that lists none, then bisecting."""
    tried = 1
    rows = fits_at(step)
    if not rows:
        return Answer(None, [], False, tried)
    good, good_rows, bad = 1, rows, None  # in units of step
    while bad is None:
        nxt = min(good * 2, limit // step)
        if nxt == good:
            return Answer(good * step, good_rows, True, tried)
        tried += 1
        rows = fits_at(nxt * step)
        if rows:
            good, good_rows = nxt, rows
        else:
            bad = nxt
    while bad - good > 1:
        mid = (good + bad) // 2
        tried += 1
        rows = fits_at(mid * step)
        if rows:
            good, good_rows = mid, rows
        else:
            bad = mid
    return Answer(good * step, good_rows, False, tried)


def fewest(fits_at: Callable[[int], Sequence], limit: int) -> Answer:
    """The fewest GPUs at which `fits_at` lists a row, of the counts tried: 1, 2, 4, ... to the
    first power of two that fits (or `limit`), then every count between the last power that did
    not fit and that one, in order."""
    tried, low, count = 0, 0, 1
    while True:
        tried += 1
        rows = fits_at(count)
        if rows:
            break
        if count >= limit:
            return Answer(None, [], True, tried)
        low, count = count, min(count * 2, limit)
    for between in range(low + 1, count):
        tried += 1
        found = fits_at(between)
        if found:
            return Answer(between, found, False, tried)
    return Answer(count, rows, False, tried)
