"""What one census child does with one config: the census, then the pricing of its spec.

This module is the fork server's preload (flows/isolate.py): importing it imports torch,
transformers, the census and the pricing once, so every forked child starts warm. Its
functions run only in those children.
"""

from __future__ import annotations

import functools

import torch  # noqa: F401  (preloaded for the forked children)

# transformers imports its model machinery lazily, on first use; resolving these names here
# makes the fork server import it once, instead of every child at its first census.
from transformers import AutoModelForCausalLM, GenerationMixin, PreTrainedModel  # noqa: F401

from speccat.catalogue.records import layouts
from speccat.catalogue.records.head import end_prices, load_head
from speccat.catalogue.records.points import check_prices, price_ends, price_points
from speccat.catalogue.records.cost import load_costs, op_costs
from speccat.catalogue.records.pricing import price_spec
from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.settings import load_settings
from speccat.census import run_census
from speccat.census.spec import ModelSpec


@functools.cache
def pricing_inputs():
    """The records, the settings grid, the recompute costs and the ends' prices (head.yaml),
    parsed and compiled once per process (about 50 ms).

    Called at import, so the fork server parses them as it preloads this module and every
    forked child inherits them instead of parsing them again for each config.
    """
    records = load_records()
    return records, load_settings(), load_costs(records), load_head(records)


pricing_inputs()


def analyse(config: dict, name: str, seq_length: int, spec_json: str | None = None) -> dict:
    """Census `config` (measured across settings too) and price its spec. Returns {"spec": JSON
    text, "prices": tables, "infeasible": rows, "point_prices": rows, "end_prices": rows,
    "op_costs": rows}: no prices at a setting where a kind cannot be laid out, a row per such kind
    instead (catalogue/records/layouts.py); the price at each setting the census measured at
    (catalogue/records/points.py); the ends' prices at every setting priced
    (catalogue/records/head.py); each op's recompute cost there (catalogue/records/cost.py).

    With `spec_json` (a spec the catalogue already holds, under records it has not been
    priced with) the census is skipped and the spec is only priced. A census refusal raises
    SpecError (its reason is kept by the parent); a pricing refusal returns the spec with
    {"price_error": (reason, message)} instead of prices, so the spec is stored and the
    failure is a `price` failures row. So does a spec the records price beyond their tolerance
    of what the census measured at any point (points.check_prices).
    """
    if spec_json is None:
        spec = run_census(config, name=name, seq_length=seq_length, across=True)
    else:
        spec = ModelSpec.from_json(spec_json)
    try:
        records, grid, costs, head = pricing_inputs()
        prices = price_spec(spec, records, grid, costs=costs)
        infeasible = layouts.infeasible(spec, records, grid)
        points = price_points(spec, records, grid, costs)
        check_prices(spec, points + price_ends(spec, records, grid, head), records)
        skip = frozenset(row["setting_id"] for row in infeasible)
        ends = end_prices(spec, records, grid, head, skip)
        ops = op_costs(spec, records, grid, costs).rows(skip)
    except ValueError as err:  # ReasonError and SpecError are ValueErrors with a reason
        return {"spec": spec.to_json(), "price_error": (getattr(err, "reason", "bad_value"), str(err))}
    return {"spec": spec.to_json(), "prices": layouts.split(prices, infeasible), "infeasible": infeasible, "point_prices": points, "end_prices": ends,
            "op_costs": ops}
