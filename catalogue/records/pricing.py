"""Pricing a spec: bytes per part for every switch set, kind and setting (docs/pricing.md).

The input is a ModelSpec mapping (with `flavours` per kind), a Records and a settings Grid:
the spec alone says what is priced. Two evaluators
give the same prices bit for bit: `fast` (catalogue/records/fastpath.py, the default) and `direct`
(catalogue/records/direct.py, the reference). `model_totals` adds the kinds up through the stack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dataclasses

from speccat.catalogue.records.cost import Costs
from speccat.catalogue.records.direct import price_direct
from speccat.catalogue.records.fastpath import price_fast
from speccat.catalogue.records.names import PricingError
from speccat.catalogue.records.priced import COLUMNS, LayerPrices, PriceTables, stack_counts
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.settings import Grid
from speccat.catalogue.records.switchcosts import switch_costs
from speccat.catalogue.records.working import price_working_sets

METHODS = {"fast": price_fast, "direct": price_direct}

__all__ = ["METHODS", "LayerPrices", "PriceTables", "PricingError", "model_totals", "price_layers", "price_spec", "stack_counts"]


def price_layers(spec: Mapping, records: Records, grid: Grid, method: str = "fast") -> LayerPrices:
    """All (kind, setting, mask) prices of `spec` as arrays; `method` is fast or direct."""
    if method not in METHODS:
        raise ValueError(f"unknown pricing method {method!r}; methods: {', '.join(METHODS)}")
    return METHODS[method](spec, records, grid)


def price_spec(spec: Mapping, records: Records, settings: Grid, method: str = "fast", costs: Costs | None = None) -> PriceTables:
    """Price every switch set × kind × setting of `spec` (a plain ModelSpec mapping with flavours).

    `settings` is a Grid. full_prices carries each kind's backward working set at each setting
    (catalogue/records/working.py). With `costs` (cost.load_costs) the tables carry the recompute costs
    and the frontier too (`switch_costs`, catalogue/records/switchcosts.py), as the catalogue
    stores them.
    """
    prices = price_layers(spec, records, settings, method)
    prices = dataclasses.replace(prices, working=price_working_sets(spec, records, settings, prices.kinds))
    tables = prices.to_tables()
    if costs is None:
        return tables
    return dataclasses.replace(tables, switch_costs=switch_costs(spec, records, settings, prices, costs))


def model_totals(spec: Mapping, tables: PriceTables) -> PriceTables:
    """Whole-model prices through the layer stack: the sum over kinds of count × layer bytes,
    one switch set for every layer (docs/pricing.md). The same tables as `tables` without `kind`, in
    the order of their first rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    counts = stack_counts(spec)
    kinds = pa.array(list(counts), pa.string())
    weights = pa.array(list(counts.values()), pa.float64())

    def weighted_sum(table: pa.Table, columns: Sequence[str], keys: Sequence[str]) -> pa.Table:
        present = set(table["kind"].unique().to_pylist())
        if present != set(counts):
            raise PricingError(
                "bad_value", f"priced kinds {sorted(present)} are not the stack's kinds {sorted(counts)}"
            )
        count = weights.take(pc.index_in(table["kind"], value_set=kinds))
        scaled = pa.table({**{k: table[k] for k in keys}, **{c: pc.multiply(table[c], count) for c in columns}})
        summed = scaled.group_by(list(keys), use_threads=False).aggregate([(c, "sum") for c in columns])
        return summed.rename_columns({f"{c}_sum": c for c in columns}).select([*keys, *columns])

    return PriceTables(
        weighted_sum(tables.layer_prices, COLUMNS, ("setting_id", "mask")),
        weighted_sum(tables.full_prices, ("kept",), ("setting_id",)),
    )
