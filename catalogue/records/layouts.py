"""Which parallel layouts a model cannot have, by the rules of catalogue/records/layouts.yaml.

A rule is an expression of the closed expression language over the names one (kind, setting)
reads (the names the op records read), true when the layout is feasible, with a message. A
setting at which any kind is infeasible is infeasible for the model: whole-model bytes there
would add a kind that cannot exist, so the catalogue holds no price of the model at that
setting, only a row per infeasible kind saying why (`split`), and `speccat price` refuses it
(LayoutError "infeasible").

Kept apart from the records (records.yaml, names.py) so the rules change on their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from speccat.catalogue.errors import ReasonError
from speccat.catalogue.records.expr import Expr
from speccat.catalogue.records.names import PricingError
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.priced import PriceTables, kinds_of, layers
from speccat.catalogue.records.settings import Grid

LAYOUTS_PATH = Path(__file__).with_name("layouts.yaml")
# The columns of an infeasible row, as the catalogue's infeasible_settings table has them.
INFEASIBLE_COLUMNS: tuple[str, ...] = ("kind", "setting_id", "rule", "message")


class LayoutError(ReasonError):
    """A parallel layout the model cannot have (the vocabulary's `layout` group)."""

    group = "layout"


@dataclass(frozen=True)
class Rule:
    name: str
    feasible: Expr
    message: str


def layouts_version(path: Path = LAYOUTS_PATH) -> str:
    """A hash of the rules' parsed content (what a cached pricing depends on)."""
    from speccat.catalogue.datafile import read_yaml, version_of

    return version_of(read_yaml(path))


@cache
def load_rules(path: Path = LAYOUTS_PATH) -> tuple[Rule, ...]:
    from speccat.catalogue.datafile import read_yaml

    data = read_yaml(path)
    return tuple(Rule(name, Expr(rule["feasible"]), rule["message"]) for name, rule in data["rules"].items())


def infeasible(spec: Mapping, records: Records, grid: Grid) -> list[dict]:
    """One row (INFEASIBLE_COLUMNS) per (kind, setting) of `grid` a rule refuses, first rule
    only, in kind-major order."""
    rows = []
    kvs = kinds_of(spec)
    for k, i, names, _ in layers(kvs, records, grid):
        for rule in load_rules():
            try:
                ok = rule.feasible(names)
                message = None if ok else rule.message.format_map(names)
            except PricingError:  # the kind lacks a name the rule reads: the rule does not apply
                continue
            if message is not None:
                kind = kvs[k].kind
                rows.append({"kind": kind, "setting_id": grid.settings[i]["setting_id"], "rule": rule.name, "message": message})
                break
    return rows


def split(tables: PriceTables, rows: Sequence[Mapping]) -> PriceTables:
    """`tables` without any price at a setting where some kind is infeasible (`rows`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    settings = sorted({r["setting_id"] for r in rows})
    if not settings:
        return tables
    drop = pa.array(settings, pa.string())

    def keep(table):
        return table.filter(pc.invert(pc.is_in(table["setting_id"], value_set=drop)))

    costs = None if tables.switch_costs is None else keep(tables.switch_costs)
    return PriceTables(keep(tables.layer_prices), keep(tables.full_prices), costs)


def check_feasible(spec: Mapping, records: Records, grid: Grid) -> None:
    """Refuse (LayoutError "infeasible", one line) a grid with a layout the model cannot have."""
    rows = infeasible(spec, records, grid)
    if rows:
        first = rows[0]
        raise LayoutError(
            "infeasible",
            f"{spec.get('name', 'the model')}: kind {first['kind']!r} cannot run at this setting: {first['message']} ({first['rule']})",
        )
