"""Each op's share of a layer's bytes: what one layer of a kind keeps for each op and part of
the records, with nothing recomputed, at every setting of the grid's memory curve (the table
op_prices; docs/pricing.md, "The memory curve").

A slot keeps its formula at `total`, the sum of the elements of the ops and parts a switch set
keeps. Each formula of the records is `total` times names the switch set does not change, so
the formula at one element alone is that element's share, and a switch set keeps the sum of the
shares of what it keeps: one row per op instead of one per switch set. That is checked, not
assumed: at every setting, every distinct kept set of every slot (the values the prices are
made of, fastpath.SlotPlan) must equal the sum of its elements' shares within a relative 1e-9,
or the spec is refused with `nonlinear_slot`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from speccat.catalogue.records.fastpath import KindPricer, slot_plans
from speccat.catalogue.records.layouts import infeasible
from speccat.catalogue.records.names import PricingError
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.priced import kinds_of
from speccat.catalogue.records.settings import Grid

RELATIVE = 1e-9  # how far a kept set's bytes may be from the sum of its elements' shares


def shares(records: Records) -> list[tuple[str, str]]:
    """Every (part, op) a slot of the records holds, in the records' order: the rows of each
    kind and setting."""
    return list(dict.fromkeys((plan.slot.part, name) for plan in slot_plans(records) for name, _ in plan.slot.elements))


def op_prices(spec: Mapping, records: Records, grid: Grid) -> list[dict]:
    """One row per (kind, setting of `grid.curve`, part, op): the share of the op (or part of
    the records) in what one layer keeps with nothing recomputed, per rank and micro-batch,
    beside the layer's bytes under full recompute; 0 where no slot holding it applies. A setting
    where some kind cannot be laid out (layouts.infeasible) has no rows, as it has no prices."""
    curve = grid.with_settings(grid.curve)
    skip = {row["setting_id"] for row in infeasible(spec, records, curve)}
    pairs = shares(records)
    column = {pair: j for j, pair in enumerate(pairs)}
    rows = []
    with np.errstate(divide="raise", over="raise", invalid="raise"):
        for kv in kinds_of(spec):
            pricer = KindPricer(kv, curve, records)
            kept = np.zeros((pricer.n, len(pairs)))
            for plan in slot_plans(records):
                singles = tuple((i,) for i in range(len(plan.slot.elements)))
                values = pricer.slot(replace(plan, combos=plan.combos + singles))
                if values is None:
                    continue
                _check_additive(plan, values, pricer)
                for i, (name, _) in enumerate(plan.slot.elements):
                    kept[:, column[(plan.slot.part, name)]] += values[:, len(plan.combos) + i]
            full = pricer.full()
            rows += [
                {"kind": kv.kind, "setting_id": s["setting_id"], "part": part, "op": op, "kept_bytes": float(kept[i, j]), "full_bytes": float(full[i])}
                for i, s in enumerate(curve.settings) if s["setting_id"] not in skip
                for j, (part, op) in enumerate(pairs)
            ]  # fmt: skip
    return rows


def switch_kept_rows(records: Records) -> list[dict]:
    """The catalogue's `switch_kept` rows: (mask, op) for every op and part of the slots that a
    switch set keeps the saves of (Records.kept)."""
    ops = dict.fromkeys(op for _, op in shares(records))
    return [{"mask": mask, "op": op} for mask in range(records.n_masks) for op in ops if op in records.kept(mask)]


def _check_additive(plan, values: np.ndarray, pricer: KindPricer) -> None:
    """Refuse a slot whose kept sets' bytes are not the sums of their elements' shares."""
    n = len(plan.combos)
    for c, kept in enumerate(plan.combos):
        summed = values[:, [n + i for i in kept]].sum(axis=1)
        off = np.abs(values[:, c] - summed) > RELATIVE * np.maximum(np.abs(values[:, c]), 1.0)
        if off.any():
            i = int(np.flatnonzero(off)[0])
            raise PricingError(
                "nonlinear_slot",
                f"{pricer.where(i, plan.slot)}: keeping {', '.join(plan.slot.elements[e][0] for e in kept) or 'nothing'} "
                f"prices {values[i, c]:.6g} B, its ops' shares add up to {summed[i]:.6g} B",
            )
