"""The records' price at each setting the census measured a kind at (docs/pricing.md,
"Priced against measured").

A spec states its measurements: the census's own (`measured`, at its sequence length, one
rank, nothing recomputed) and the points across settings (`measured_at`: a second sequence
length, context- and tensor-parallel ranks, switch sets recomputed). Each becomes one setting of
the grid's fields (the census measures the `transformers` stack, one micro-batch) and one switch set,
and is priced with the records, never from the measured bytes. The night stores the rows in
`point_prices`; the view `priced_vs_measured` sets them beside the measured bytes.

Each row also prices the layer's forward FLOPs at the point's setting from costs.yaml (what full
recompute re-runs, cost.OpCosts.forward), set beside the FLOPs the census counted at its own
point (the spec's `measured` `forward_flops`, census/measure/flops.py). A FLOP count off the census's is
shown by the view, not refused: the bytes alone decide whether a spec is priced. And it prices the
working set of the layer's backward (records.yaml `working_set`, catalogue/records/working.py),
which at the point `census` is checked against the backward peak the census measured, as the
bytes are.
"""

from __future__ import annotations

from collections.abc import Mapping

from speccat.catalogue.records.cost import Costs, load_costs, op_costs
from speccat.catalogue.records.ends import Ends, price_ends_at
from speccat.catalogue.records.names import PricingError
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.settings import Grid
from speccat.catalogue.records.working import price_working_sets
from speccat.catalogue.vocabulary import CACHED, END_PARTS

CENSUS_POINT = "census"  # the census's own measurement (the spec's `measured`)
END_KIND = "end:"  # check_prices' rows for the model's ends: `end:embedding`, ...
POINT_FIELDS = ("kind", "point", "priced_per_token", "forward_flops", "backward_peak_per_token")
PEAK_KIND = "peak:"  # worst_ratio's label of a kind's backward peak: `peak:decoder`


def points_of(spec: Mapping) -> list[Mapping]:
    """The spec's measurement points, the census's own first, each with its setting."""
    own = {m["seq_length"] for m in spec.get("measured", {}).values()}
    points = [
        {"point": CENSUS_POINT, "seq_length": s, "tp": 1, "cp": 1, "sequence_parallel": False, "recompute": [], "stack": "transformers"}
        for s in sorted(own)[:1]
    ]
    return points + [dict(p, stack="transformers") for p in spec.get("measured_at", [])]


def price_points(spec: Mapping, records: Records, grid: Grid, costs: Costs | None = None) -> list[dict]:
    """One row per (kind, point): the records' bytes per token of one layer at the point's setting
    and mask, and costs.yaml's FLOPs of its forward at that setting (`costs`, read from
    costs.yaml when not given)."""
    points = points_of(spec)
    if not points:
        return []
    # a cross-attention kind's points state the encoder tokens it was given (the fixed setting encoder_tokens)
    # and the census's attention kernel: FlashAttention's, the window an argument (no mask kept)
    chosen = [grid.setting({k: p[k] for k in ("stack", "seq_length", "tp", "cp", "sequence_parallel", "encoder_tokens") if k in p} | {"micro_batch": 1, "attention_kernel": "flash"}) for p in points]
    settings = {setting["setting_id"]: setting for setting in chosen}  # points sharing a setting price it once
    column = {setting_id: i for i, setting_id in enumerate(settings)}
    at = grid.with_settings(settings.values())
    prices = price_layers(spec, records, at)
    working = price_working_sets(spec, records, at, prices.kinds)
    priced = op_costs(spec, records, at, costs or load_costs(records))
    forward = dict(zip(priced.kinds, priced.forward()[0]))  # kind -> [setting]
    rows = []
    for point, setting in zip(points, chosen):
        i, mask = column[setting["setting_id"]], records.mask_of(point["recompute"])
        for k, kind in enumerate(prices.kinds):
            per_token = float(prices.total[k, i, mask]) / point["seq_length"]
            peak = float(working[k, i]) / point["seq_length"]
            rows.append({"kind": kind, "point": point["point"], "priced_per_token": per_token, "forward_flops": float(forward[kind][i]),
                         "backward_peak_per_token": None if peak != peak else peak})
    return rows


def measured_per_token(spec: Mapping) -> dict[tuple[str, str], float]:
    """(kind, point) → the bytes per token the census measured the layer keeping there: the sum
    over its ops, less what the selective-checkpoint cache holds beyond plain autograd (op
    `cached`); and (`end:PART`, `census`) → what each of the model's ends keeps."""
    def kept(booked: Mapping[str, float]) -> float:
        return sum(v for op, v in booked.items() if op != CACHED)

    out = {(kind, CENSUS_POINT): kept(m["bytes_per_token"]) for kind, m in spec.get("measured", {}).items()}
    for point in spec.get("measured_at", []):
        out.update({(kind, point["point"]): kept(booked) for kind, booked in point["bytes_per_token"].items()})
    ends = spec.get("ends", {}).get("bytes_per_token", {})
    out.update({(f"{END_KIND}{part}", CENSUS_POINT): float(value) for part, value in ends.items()})
    return out


def price_ends(spec: Mapping, records: Records, grid: Grid, ends: Ends) -> list[dict]:
    """The ends.yaml price of each of the model's ends at the setting the census measured them
    at (spec `ends`), per token, as rows like price_points' (kind `end:PART`, point `census`)."""
    measured = spec.get("ends")
    if measured is None:
        return []
    seq = measured["seq_length"]
    setting = grid.setting({"stack": "transformers", "seq_length": seq, "micro_batch": 1, "tp": 1, "cp": 1, "sequence_parallel": False})
    priced = price_ends_at(spec, records, setting, grid.dtype_bytes, ends)
    return [{"kind": f"{END_KIND}{part}", "point": CENSUS_POINT, "priced_per_token": priced[part] / seq} for part in END_PARTS]


def measured_peaks(spec: Mapping) -> dict[str, float]:
    """kind → the backward peak the census measured, per token of its sequence (census version 18 on)."""
    return {kind: m["backward_peak"] / m["seq_length"] for kind, m in spec.get("measured", {}).items()
            if "working_set" in m and "backward_peak" in m}


def worst_ratio(spec: Mapping, rows: list[Mapping]) -> tuple[Mapping, float, float] | None:
    """Of price_points' rows (and price_ends'), the one priced furthest from what the census
    measured there, its bytes or, at the point `census`, its backward peak (as a row of kind
    `peak:KIND`): (row, measured bytes per token, priced over measured); None when no row's
    point measured any bytes."""
    measured, peaks = measured_per_token(spec), measured_peaks(spec)
    ratios = [(row, got, row["priced_per_token"] / got) for row in rows if (got := measured.get((row["kind"], row["point"])))]
    ratios += [
        ({"kind": f"{PEAK_KIND}{row['kind']}", "point": row["point"], "priced_per_token": row["backward_peak_per_token"]}, got,
         row["backward_peak_per_token"] / got)
        for row in rows
        if row["point"] == CENSUS_POINT and row.get("backward_peak_per_token") is not None and (got := peaks.get(row["kind"]))
    ]
    return max(ratios, key=lambda item: abs(item[2] - 1), default=None)


def check_prices(spec: Mapping, rows: list[Mapping], records: Records) -> None:
    """Refuse a spec whose price at any measured point (price_points' rows, and price_ends') is
    off the measured bytes by more than the records' `tolerance`: `unsupported_layer`, naming
    the worst kind and point. Bad data is never priced: a kind keeping bytes no record prices
    (op `other`), or kept in a way no formula describes, gets no prices rather than wrong ones;
    so does one whose backward peak the records price beyond the tolerance (kind `peak:KIND`)."""
    worst = worst_ratio(spec, rows)
    if worst is None or abs(worst[2] - 1) <= records.tolerance:
        return
    row, got, ratio = worst
    raise PricingError(
        "unsupported_layer",
        f"kind {row['kind']!r} at point {row['point']!r}: the records price {row['priced_per_token']:.0f} B/token, the census measured "
        f"{got:.0f} ({ratio - 1:+.1%}, beyond the records' tolerance of {records.tolerance:.0%}): the spec and its measured bytes per op are stored, no prices",
    )
