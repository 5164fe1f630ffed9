"""What both pricing evaluators share: the result types and the per-layer steps.

`LayerPrices` holds prices as arrays shaped (kind, setting, mask); `PriceTables` the Arrow
tables the catalogue store ingests. The helpers fix the conventions both evaluators follow,
so that they agree bit for bit: a slot value is checked (finite, >= 0) and a float64; parts
are summed in slot order from 0.0; total = attention + ffn + norm.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from speccat.catalogue.records.expr import ExprError
from speccat.catalogue.records.names import KindValues, LayerNames, PricingError, bind, kind_values
from speccat.catalogue.vocabulary import PARTS
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.settings import Grid

COLUMNS = (*PARTS, "total")


@dataclass(frozen=True)
class PriceTables:
    """Arrow tables the catalogue store ingests (it adds config_hash and records_version).

    layer_prices: kind, setting_id, mask (int16), attention, ffn, norm, total (float64).
    full_prices: kind, setting_id, kept, backward_peak (float64; backward_peak null where the
        spec states no working set).
    switch_costs: catalogue/records/switchcosts.py's table, when the pricing was asked for the
        recompute costs too (pricing.price_spec with `costs`); None otherwise.
    """

    layer_prices: Any  # pyarrow.Table
    full_prices: Any  # pyarrow.Table
    switch_costs: Any = None  # pyarrow.Table or None


@dataclass(frozen=True, eq=False)
class LayerPrices:
    """Prices as arrays: parts and total shaped (kind, setting, mask), full (kind, setting), and
    working (kind, setting): the working set of a layer's backward (catalogue/records/working.py),
    NaN where unpriced, None when not asked for."""

    kinds: tuple[str, ...]
    setting_ids: tuple[str, ...]
    attention: np.ndarray
    ffn: np.ndarray
    norm: np.ndarray
    total: np.ndarray
    full: np.ndarray
    working: np.ndarray | None = None

    def part(self, name: str) -> np.ndarray:
        return {"attention": self.attention, "ffn": self.ffn, "norm": self.norm, "total": self.total}[name]

    def same_bits(self, other: LayerPrices) -> bool:
        """Whether every price equals `other`'s bit for bit."""
        return (
            self.kinds == other.kinds
            and self.setting_ids == other.setting_ids
            and all(self.part(p).tobytes() == other.part(p).tobytes() for p in COLUMNS)
            and self.full.tobytes() == other.full.tobytes()
        )

    def to_tables(self) -> PriceTables:
        import pyarrow as pa

        n_kinds, n_settings, n_masks = self.total.shape
        kinds = pa.array(self.kinds, pa.string())
        settings = pa.array(self.setting_ids, pa.string())
        rows = n_kinds * n_settings * n_masks
        kind_idx = np.repeat(np.arange(n_kinds), n_settings * n_masks)
        setting_idx = np.tile(np.repeat(np.arange(n_settings), n_masks), n_kinds)
        layer = pa.table(
            {
                "kind": kinds.take(kind_idx),
                "setting_id": settings.take(setting_idx),
                "mask": pa.array(np.tile(np.arange(n_masks, dtype=np.int16), n_kinds * n_settings)),
                **{p: pa.array(self.part(p).reshape(rows)) for p in COLUMNS},
            }
        )
        full = pa.table(
            {
                "kind": kinds.take(np.repeat(np.arange(n_kinds), n_settings)),
                "setting_id": settings.take(np.tile(np.arange(n_settings), n_kinds)),
                "kept": pa.array(self.full.reshape(n_kinds * n_settings)),
                "backward_peak": _nullable(self.working, n_kinds * n_settings),
            }
        )
        return PriceTables(layer, full)


def _nullable(values: np.ndarray | None, n: int) -> Any:
    """A float64 column of `values` (flattened), null where NaN or when there are none."""
    import pyarrow as pa

    if values is None:
        return pa.nulls(n, pa.float64())
    flat = values.reshape(n)
    return pa.array(flat, mask=np.isnan(flat))


def checked(value: Any, where: str) -> float:
    """A slot's (or full recompute's) bytes as float64: refused unless finite and >= 0."""
    try:
        number = float(value)
    except OverflowError:
        raise PricingError("bad_value", f"{where}: {value!r:.60} bytes is beyond float range") from None
    if not (number >= 0 and number != float("inf")):
        raise PricingError("bad_value", f"{where}: priced {number!r} bytes; prices must be finite and >= 0")
    return number


def stack_counts(spec: Mapping) -> dict[str, int]:
    """Layers per kind through the stack, kinds in order of first appearance."""
    counts: dict[str, int] = {}
    for group in spec["layers"]:
        counts[group["kind"]] = counts.get(group["kind"], 0) + group["count"]
    return counts


def kinds_of(spec: Mapping) -> list[KindValues]:
    """The spec-and-kind names of each kind of the stack, in order."""
    return [kind_values(spec, kind) for kind in stack_counts(spec)]


def layers(kvs: Sequence[KindValues], records: Records, grid: Grid) -> Iterator[tuple[int, int, LayerNames, str]]:
    """Each (kind index, setting index, names, where) in kind-major order."""
    for k, kv in enumerate(kvs):
        for i, setting in enumerate(grid.settings):
            names = bind(kv, setting, grid.dtype_bytes, records)
            yield k, i, names, f"kind {kv.kind!r}, setting {setting['setting_id']}"


def full_bytes(records: Records, names: LayerNames, where: str) -> float:
    try:
        return checked(records.full(names), f"{where}, full recompute")
    except ExprError as err:
        raise PricingError("bad_value", f"{where}, full recompute: {err}") from None


def result(kvs: Sequence[KindValues], grid: Grid, parts: dict[str, np.ndarray], full: np.ndarray) -> LayerPrices:
    """The evaluators' arrays as LayerPrices; a part sum beyond float range is refused."""
    with np.errstate(over="ignore"):
        total = parts["attention"] + parts["ffn"] + parts["norm"]
    if not np.all(np.isfinite(total)):
        k, i, mask = (int(x[0]) for x in np.nonzero(~np.isfinite(total)))
        where = f"kind {kvs[k].kind!r}, setting {grid.settings[i]['setting_id']}, mask {mask}"
        raise PricingError("bad_value", f"{where}: the layer's bytes add up beyond float range")
    kinds = tuple(kv.kind for kv in kvs)
    setting_ids = tuple(s["setting_id"] for s in grid.settings)
    return LayerPrices(kinds, setting_ids, parts["attention"], parts["ffn"], parts["norm"], total, full)
