"""The catalogue's `switch_costs` rows of a spec: per (kind, setting, point) the recompute cost
and where the point stands among the switch sets (docs/planning.md, docs/catalogue.md).

A point is a switch set (its `mask`, 0..n-1) or full recompute (`frontier.FULL`, -1). The costs are
cost.py's (costs.yaml), the classes and the frontier frontier.py's; nothing is computed here
but their arrangement as one Arrow table, kind-major like `LayerPrices.to_tables`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from speccat.catalogue.records.cost import Costs, op_costs
from speccat.catalogue.records.frontier import FULL, Frontier, frontier
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.priced import LayerPrices
from speccat.catalogue.records.settings import Grid

# The columns of a switch_costs table as pricing hands it to the store (it adds the keys).
SWITCH_COST_COLUMNS: tuple[str, ...] = (
    "kind", "setting_id", "mask", "recompute_flops", "recompute_bytes", "step_flops", "representative", "on_frontier",
)


def spec_frontier(spec: Mapping, records: Records, grid: Grid, prices: LayerPrices, costs: Costs) -> tuple[Frontier, np.ndarray]:
    """The frontier of every (kind, setting) of `spec` and the layer's step FLOPs ([kind, setting]:
    `costs.step_factor` forwards)."""
    oc = op_costs(spec, records, grid, costs)
    if oc.kinds != prices.kinds or oc.setting_ids != prices.setting_ids:
        raise ValueError("the costs and the prices are not of the same kinds and settings")
    flops, moved = oc.masks(records)
    forward_flops, forward_moved = oc.forward()
    return frontier(prices, flops, moved, forward_flops, forward_moved), costs.step_factor * forward_flops


def switch_cost_table(front: Frontier, step_flops: np.ndarray, kinds: tuple[str, ...], setting_ids: tuple[str, ...]):
    """One row per (kind, setting, point): SWITCH_COST_COLUMNS; full recompute is mask -1, its
    own representative."""
    import pyarrow as pa

    n_kinds, n_settings, n_points = front.kept.shape
    rows = n_kinds * n_settings * n_points
    masks = np.arange(n_points, dtype=np.int16)
    masks[-1] = FULL
    representative = np.concatenate(
        [front.representative.astype(np.int16), np.full((n_kinds, n_settings, 1), FULL, dtype=np.int16)], axis=2
    )
    return pa.table(
        {
            "kind": pa.array(kinds, pa.string()).take(np.repeat(np.arange(n_kinds), n_settings * n_points)),
            "setting_id": pa.array(setting_ids, pa.string()).take(np.tile(np.repeat(np.arange(n_settings), n_points), n_kinds)),
            "mask": pa.array(np.tile(masks, n_kinds * n_settings)),
            "recompute_flops": pa.array(front.flops.reshape(rows)),
            "recompute_bytes": pa.array(front.moved.reshape(rows)),
            "step_flops": pa.array(np.repeat(step_flops.reshape(n_kinds * n_settings), n_points).astype(float)),
            "representative": pa.array(representative.reshape(rows)),
            "on_frontier": pa.array(front.on_frontier.reshape(rows)),
        }
    )


def switch_costs(spec: Mapping, records: Records, grid: Grid, prices: LayerPrices, costs: Costs):
    """The switch_costs table of `spec` priced as `prices` (pricing.price_layers)."""
    front, step = spec_frontier(spec, records, grid, prices, costs)
    return switch_cost_table(front, step, prices.kinds, prices.setting_ids)
