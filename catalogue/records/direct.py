"""The direct evaluator: every (kind, setting, mask) priced on its own, slot by slot.

It is the reference the fast path (catalogue/records/fastpath.py) must equal bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from speccat.catalogue.records.expr import ExprError
from speccat.catalogue.records.names import PricingError
from speccat.catalogue.vocabulary import PARTS
from speccat.catalogue.records.priced import LayerPrices, checked, full_bytes, kinds_of, layers, result
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.settings import Grid


def price_direct(spec: Mapping, records: Records, grid: Grid) -> LayerPrices:
    """Evaluate every (kind, setting, mask) on its own."""
    kvs = kinds_of(spec)
    n_kinds, n_settings, n_masks = len(kvs), len(grid.settings), records.n_masks
    parts = {p: np.zeros((n_kinds, n_settings, n_masks)) for p in PARTS}
    full = np.zeros((n_kinds, n_settings))
    for k, i, names, where in layers(kvs, records, grid):
        full[k, i] = full_bytes(records, names, where)
        for mask in range(n_masks):
            kept = records.kept(mask)
            sums = dict.fromkeys(PARTS, 0.0)
            for slot in records.slots:
                try:
                    if slot.applies(names):
                        sums[slot.part] += checked(slot.value(names, kept), f"{where}, slot {slot.name}")
                except (ExprError, OverflowError) as err:
                    raise PricingError("bad_value", f"{where}, slot {slot.name}: {err}") from None
            for p in PARTS:
                parts[p][k, i, mask] = sums[p]
    return result(kvs, grid, parts, full)
