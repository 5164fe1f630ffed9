"""The records' price at each setting the census measured a kind at (docs/pricing.md,
"Priced against measured").

A spec states its measurements: the census's own (`measured`, at its sequence length, one
rank, nothing recomputed) and the points across settings (`measured_at`: a second sequence
length, context- and tensor-parallel ranks, switch sets recomputed). Each becomes one setting of
the grid's fields (the census measures the `transformers` stack, one micro-batch) and one mask,
and is priced with the records, never from the measured bytes. The night stores the rows in
`point_prices`; the view `priced_vs_measured` sets them beside the measured bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.settings import Grid

CENSUS_POINT = "census"  # the census's own measurement (the spec's `measured`)
POINT_FIELDS = ("kind", "point", "priced_per_token")


def points_of(spec: Mapping) -> list[Mapping]:
    """The spec's measurement points, the census's own first, each with its setting."""
    own = {m["seq_length"] for m in spec.get("measured", {}).values()}
    points = [
        {"point": CENSUS_POINT, "seq_length": s, "tp": 1, "cp": 1, "sequence_parallel": False, "recompute": [], "stack": "transformers"}
        for s in sorted(own)[:1]
    ]
    return points + [dict(p, stack="transformers") for p in spec.get("measured_at", [])]


def price_points(spec: Mapping, defaults: Mapping, records: Records, grid: Grid) -> list[dict]:
    """One row per (kind, point): the records' bytes per token of one layer at the point's setting and mask."""
    points = points_of(spec)
    if not points:
        return []
    chosen = [grid.setting({k: p[k] for k in ("stack", "seq_length", "tp", "cp", "sequence_parallel")} | {"micro_batch": 1}) for p in points]
    settings = {setting["setting_id"]: setting for setting in chosen}  # points sharing a setting price it once
    column = {setting_id: i for i, setting_id in enumerate(settings)}
    prices = price_layers(spec, defaults, records, grid.with_settings(settings.values()))
    rows = []
    for point, setting in zip(points, chosen):
        i, mask = column[setting["setting_id"]], records.mask_of(point["recompute"])
        for k, kind in enumerate(prices.kinds):
            rows.append({"kind": kind, "point": point["point"], "priced_per_token": float(prices.total[k, i, mask]) / point["seq_length"]})
    return rows
