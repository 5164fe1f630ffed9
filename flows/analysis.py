"""What one census child does with one config: the census, then the pricing of its spec,
checked against what the census measured (`census_priced`, which `speccat price` and `speccat
fit` share with the night).

This module is the fork server's preload (flows/isolate.py): importing it imports torch,
transformers, the census and the pricing once, so every forked child starts warm. Its
functions run in those children, and in the process of `speccat price` and `speccat fit`,
which import it once they census.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch  # noqa: F401  (preloaded for the forked children)

# transformers imports its model machinery lazily, on first use; resolving these names here
# makes the fork server import it once, instead of every child at its first census (every
# model's module imports modeling_layers, and with it the processors' modules and numpy.ma).
from transformers import AutoModelForCausalLM, GenerationMixin, PreTrainedModel  # noqa: F401
from transformers.modeling_layers import GradientCheckpointingLayer  # noqa: F401

from speccat.catalogue.errors import ReasonError
from speccat.catalogue.records import layouts
from speccat.catalogue.records.ends import end_prices, load_ends, loss_prices
from speccat.catalogue.records.points import check_prices, price_ends, price_points
from speccat.catalogue.records.cost import load_costs, op_costs
from speccat.catalogue.records.opsplit import op_prices
from speccat.catalogue.records.names import PricingError
from speccat.catalogue.records.pricing import price_spec
from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.family_widths import family_widths
from speccat.catalogue.records.settings import default_setting, load_settings
from speccat.census import run_census
from speccat.census.spec import ModelSpec
from speccat.census.structure.family import DEFAULT_FAMILY, family_for


@functools.cache
def pricing_inputs():
    """The records, the settings grid, the recompute costs and the ends' prices (ends.yaml),
    parsed and compiled once per process (about 50 ms)."""
    records = load_records()
    return records, load_settings(), load_costs(records), load_ends(records)


def parse_data_files() -> None:
    """Parse every data file a census and its pricing read, each into the cache its reader
    keeps: the pricing's inputs, the family profiles (read by the census, and by the pricing for
    their widths), the layout rules and the shipped grid's defaults.

    Called at import, so the fork server parses them as it preloads this module and every
    forked child inherits them: a child parsed some 20 of them again for each config, about
    0.1 s (a config's census and pricing takes 0.5 to 10 s).
    """
    pricing_inputs()
    family_for(DEFAULT_FAMILY)
    family_widths(DEFAULT_FAMILY)
    layouts.load_rules()
    default_setting()


parse_data_files()


@dataclass(frozen=True)
class Outcome:
    """One config censused, priced and checked, as the night takes it: its spec, and either what
    the catalogue stores of its prices (`priced`: the rows analyse returns beside the spec) or
    the pricing refusal that leaves the spec stored unpriced (`refusal`)."""

    spec: ModelSpec
    priced: dict | None = None
    refusal: ValueError | None = None

    def checked(self) -> ModelSpec:
        """The spec, or the night's refusal raised with its reason: what `speccat price` and
        `speccat fit` build on, so that neither prices a spec the night stores unpriced."""
        if self.refusal is None:
            return self.spec
        if isinstance(self.refusal, ReasonError):
            raise self.refusal
        raise PricingError("bad_value", str(self.refusal)) from self.refusal


def checked_points(spec, records, grid, costs, ends) -> list[dict]:
    """The records' prices at every point the census measured `spec` at, its ends' included,
    checked against what it measured there (points.check_prices: PricingError
    `unsupported_layer` beyond the records' tolerance); the layers' point rows."""
    points = price_points(spec, records, grid, costs)
    check_prices(spec, points + price_ends(spec, records, grid, ends), records)
    return points


def census_priced(config: dict, name: str, seq_length: int | None = None, spec_json: str | None = None) -> Outcome:
    """Census `config` (measured across settings too), price its spec and check the price: the
    one composition of census, price and check, which the night (`analyse`), `speccat price` and
    `speccat fit` share. `seq_length` defaults to the census's (catalogue/shared.yaml).

    The spec is priced at every setting of its grid (`Grid.priced_at`: the grid's, and for a spec
    with routed experts the overload settings too) with its recompute costs; no prices at a
    setting where a kind cannot be laid out, a row per such kind instead
    (catalogue/records/layouts.py); the price at each setting the census measured at
    (catalogue/records/points.py), checked against what it measured (points.check_prices); the
    ends' prices at every setting priced (catalogue/records/ends.py); each op's recompute cost
    there (catalogue/records/cost.py); each op's share of the bytes at the settings of the memory
    curve where every kind can be laid out (catalogue/records/opsplit.py).

    With `spec_json` (a spec the catalogue already holds, under records it has not been
    priced with) the census is skipped and the spec is only priced. A census refusal raises
    SpecError; a pricing refusal, a spec the records price beyond their tolerance of what the
    census measured at any point among them, is the outcome's `refusal`.
    """
    if spec_json is None:
        spec = run_census(config, name=name, seq_length=seq_length, across=True)
    else:
        spec = ModelSpec.from_json(spec_json)
    try:
        records, grid, costs, ends = pricing_inputs()
        at = grid.priced_at(spec)  # the grid, and the overload settings for routed experts
        prices = price_spec(spec, records, at, costs=costs)
        infeasible = layouts.infeasible(spec, records, at)
        points = checked_points(spec, records, grid, costs, ends)
        skip = frozenset(row["setting_id"] for row in infeasible)
        end_rows = end_prices(spec, records, at, ends, skip)
        loss_rows = loss_prices(spec, records, at, ends, skip)
        ops = op_costs(spec, records, at, costs).rows(skip)
        shares = op_prices(spec, records, grid)
    except ValueError as err:  # ReasonError and SpecError are ValueErrors with a reason
        return Outcome(spec, refusal=err)
    priced = {"prices": layouts.split(prices, infeasible), "infeasible": infeasible, "point_prices": points, "end_prices": end_rows,
              "loss_prices": loss_rows, "op_costs": ops, "op_prices": shares}
    return Outcome(spec, priced=priced)


def analyse(config: dict, name: str, seq_length: int, spec_json: str | None = None) -> dict:
    """What a census child returns for one config (census_priced): {"spec": JSON text,
    "prices": tables, "infeasible": rows, "point_prices": rows, "end_prices": rows, "loss_prices":
    rows, "op_costs": rows, "op_prices": rows}. A census refusal raises SpecError (its reason is kept by the parent); a pricing
    refusal returns the spec with {"price_error": (reason, message)} instead of prices, so the
    spec is stored and the failure is a `price` failures row.
    """
    outcome = census_priced(config, name, seq_length, spec_json)
    if outcome.refusal is not None:
        err = outcome.refusal
        return {"spec": outcome.spec.to_json(), "price_error": (getattr(err, "reason", "bad_value"), str(err))}
    return {"spec": outcome.spec.to_json(), **outcome.priced}
