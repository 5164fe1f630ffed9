"""The fast pricing path: many (kind, setting, mask) prices per expression evaluation.

Two facts make it fast, and both keep it exact (equal to catalogue/records/direct.py bit for bit):

1. A slot's value depends on the switch set only through which of the slot's own elements the set
   keeps, so it takes at most 2^k values, k the switches touching the slot (v1: at most 3).
   Each slot is evaluated once per distinct kept set ("combo"), with the direct path's
   summation order, and an index array spreads the values over all switch sets.
2. All of a kind's settings are evaluated at once: a setting name that varies over the grid is
   bound to a float64 numpy array (one row per setting) and `total` to a (setting, combo)
   array. This is exact only for an expression whose every operation on those arrays is
   elementwise IEEE arithmetic (Expr.elementwise: `+ - * / //`, unary minus, max/min); names are
   Python floats (catalogue/records/names.py), so numpy performs the very operations Python would.
   An expression that is not elementwise (a comparison or conditional on a varying name, `**`
   of one, ...), or whose array evaluation raises, is evaluated setting by setting instead:
   that is the fallback, chosen per expression. numpy runs with floating-point errors raised,
   so anything Python refuses (division by zero, overflow) also leaves the array path and is
   reported by the scalar evaluation, exactly as the direct path reports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from speccat.catalogue.records.expr import Expr, ExprError
from speccat.catalogue.records.names import TOTAL, KindValues, LayerNames, PricingError, bind, setting_values
from speccat.catalogue.vocabulary import PARTS
from speccat.catalogue.records.priced import LayerPrices, checked, full_bytes, kinds_of, result
from speccat.catalogue.records.oprecords import Records, Slot
from speccat.catalogue.records.settings import Grid


@dataclass(frozen=True)
class SlotPlan:
    """A slot's distinct kept sets over all switch sets, and which one each switch set has."""

    slot: Slot
    combos: tuple[tuple[int, ...], ...]  # per distinct kept set: the kept element indices
    index: np.ndarray  # mask -> position in combos


@lru_cache(maxsize=16)
def slot_plans(records: Records) -> tuple[SlotPlan, ...]:
    plans = []
    for slot in records.slots:
        combos: dict[tuple[int, ...], int] = {}
        index = np.empty(records.n_masks, dtype=np.intp)
        for mask in range(records.n_masks):
            kept = records.kept(mask)
            key = tuple(i for i, (name, _) in enumerate(slot.elements) if name in kept)
            index[mask] = combos.setdefault(key, len(combos))
        plans.append(SlotPlan(slot, tuple(combos), index))
    return tuple(plans)


def _combo_total(elements: list[Any], kept: tuple[int, ...]) -> Any:
    """The kept elements' sum, as Slot.total sums: from 0.0, in element order."""
    total = 0.0
    for i in kept:
        total = total + elements[i]
    return total


class _Array(Exception):
    """An expression that cannot (or could not) be evaluated exactly over arrays."""


def _finite_non_negative(values: np.ndarray) -> bool:
    return bool(np.all(values >= 0) and np.all(np.isfinite(values)))


class KindPricer:
    """One kind at every setting of a grid: array names, and per-setting names on demand."""

    def __init__(self, kv: KindValues, grid: Grid, records: Records):
        self.kv, self.grid, self.records = kv, grid, records
        self.n = len(grid.settings)
        per_setting = [setting_values(s, grid.dtype_bytes) for s in grid.settings]
        values: dict[str, Any] = dict(kv.values)
        arrays: set[str] = set()
        unavailable: set[str] = set()
        for name in dict.fromkeys(n for p in per_setting for n in p):
            column = [p.get(name) for p in per_setting]
            if None in column:  # supplied at some settings only: leave it to the scalar path
                unavailable.add(name)
            elif all(v == column[0] for v in column):
                values[name] = column[0]
            else:
                values[name] = np.array(column, dtype=np.float64).reshape(self.n, 1)
                arrays.add(name)
        for name, expr in records.derived.items():  # derived names follow what they read
            if expr.names & unavailable:
                unavailable.add(name)
            elif expr.names & arrays:
                (arrays if expr.elementwise(frozenset(arrays)) else unavailable).add(name)
        self.arrays = frozenset(arrays)
        self.arrays_total = self.arrays | {TOTAL}
        self.unavailable = frozenset(unavailable)
        self.names = LayerNames(values, kv.absent, records.derived, records.defaults, arrays=True)
        self._scalar: list[LayerNames] | None = None

    # -- the scalar path, setting by setting (what the direct evaluator does)

    def scalar(self, i: int) -> LayerNames:
        """The direct path's names for setting i (built on the first fallback)."""
        if self._scalar is None:
            self._scalar = [bind(self.kv, s, self.grid.dtype_bytes, self.records) for s in self.grid.settings]
        return self._scalar[i]

    def where(self, i: int, slot: Slot | None = None) -> str:
        where = f"kind {self.kv.kind!r}, setting {self.grid.settings[i]['setting_id']}"
        return where if slot is None else f"{where}, slot {slot.name}"

    def fail(self, i: int, slot: Slot, err: Exception) -> PricingError:
        return PricingError("bad_value", f"{self.where(i, slot)}: {err}")

    def scalar_expr(self, expr: Expr, i: int, slot: Slot) -> Any:
        try:
            return expr(self.scalar(i))
        except ExprError as err:
            raise self.fail(i, slot, err) from None

    def scalar_value(self, slot: Slot, i: int, total: float) -> float:
        try:
            return checked(slot.at_total(self.scalar(i), total), self.where(i, slot))
        except ExprError as err:
            raise self.fail(i, slot, err) from None

    def slot_by_setting(self, plan: SlotPlan, applies: np.ndarray) -> np.ndarray:
        values = np.zeros((self.n, len(plan.combos)))
        for i in np.flatnonzero(applies):
            elements = [self.scalar_expr(expr, i, plan.slot) for _, expr in plan.slot.elements]
            for c, kept in enumerate(plan.combos):
                try:
                    total = _combo_total(elements, kept)
                except OverflowError as err:
                    raise self.fail(i, plan.slot, err) from None
                values[i, c] = self.scalar_value(plan.slot, i, total)
        return values

    # -- the array path, all settings at once, each expression falling back on its own

    def map(self, expr: Expr, arrays: frozenset[str]) -> Any:
        if expr.names & self.unavailable or not expr.elementwise(arrays):
            raise _Array
        try:
            return expr.map(self.names)
        except (ExprError, PricingError):
            raise _Array from None

    def column(self, expr: Expr, slot: Slot) -> Any:
        """`expr` at every setting: a scalar if it reads no varying name, else an (n, 1) array."""
        try:
            return self.map(expr, self.arrays)
        except _Array:
            return np.array([self.scalar_expr(expr, i, slot) for i in range(self.n)], dtype=np.float64).reshape(self.n, 1)

    def applies(self, slot: Slot) -> bool | np.ndarray:
        """True, False, or a per-setting boolean array when the slot applies at some only."""
        if slot.when is None:
            return True
        if not slot.when.names & (self.arrays | self.unavailable):
            try:
                return bool(slot.when(self.names))
            except ExprError as err:
                raise self.fail(0, slot, err) from None
        flags = np.array([bool(self.scalar_expr(slot.when, i, slot)) for i in range(self.n)])
        return bool(flags[0]) if flags.all() or not flags.any() else flags

    def slot(self, plan: SlotPlan) -> np.ndarray | None:
        """The slot's bytes shaped (setting, combo), or None when it applies at no setting."""
        applies = self.applies(plan.slot)
        if applies is False:
            return None
        if applies is True:
            try:
                return self.slot_arrays(plan)
            except _Array:
                applies = np.ones(self.n, dtype=bool)
        return self.slot_by_setting(plan, applies)

    def slot_arrays(self, plan: SlotPlan) -> np.ndarray:
        elements = [self.column(expr, plan.slot) for _, expr in plan.slot.elements]
        totals = np.empty((self.n, len(plan.combos)))
        try:
            for c, kept in enumerate(plan.combos):
                totals[:, c : c + 1] = _combo_total(elements, kept)
        except (OverflowError, FloatingPointError):
            raise _Array from None
        self.names[TOTAL] = totals
        try:
            values = np.broadcast_to(self.map(plan.slot.formula, self.arrays_total), totals.shape)
        except _Array:
            values = np.array(
                [[self.scalar_value(plan.slot, i, float(totals[i, c])) for c in range(totals.shape[1])] for i in range(self.n)]
            )
        if not _finite_non_negative(values):
            raise _Array  # the scalar path reports the offending value as the direct path does
        return values

    def full(self) -> np.ndarray:
        """Full recompute's bytes at every setting."""
        try:
            value = np.asarray(self.map(self.records.full, self.arrays), dtype=np.float64)
            values = np.broadcast_to(value.reshape(-1), (self.n,))
            if _finite_non_negative(values):
                return values
        except (_Array, OverflowError):
            pass
        return np.array([full_bytes(self.records, self.scalar(i), self.where(i)) for i in range(self.n)])


def price_fast(spec: Mapping, records: Records, grid: Grid) -> LayerPrices:
    """Every (kind, setting, mask) price of `spec`, equal bit for bit to price_direct."""
    plans = slot_plans(records)
    kvs = kinds_of(spec)
    shape = (len(kvs), len(grid.settings), records.n_masks)
    parts = {p: np.zeros(shape) for p in PARTS}
    full = np.zeros(shape[:2])
    if not grid.settings:
        return result(kvs, grid, parts, full)
    with np.errstate(divide="raise", over="raise", invalid="raise"):
        for k, kv in enumerate(kvs):
            pricer = KindPricer(kv, grid, records)
            full[k] = pricer.full()
            for plan in plans:
                values = pricer.slot(plan)
                if values is not None:
                    with np.errstate(over="ignore"):  # result() refuses a sum beyond float range
                        parts[plan.slot.part][k] += values[:, plan.index]
    return result(kvs, grid, parts, full)
