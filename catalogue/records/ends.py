"""Pricing the model's ends: the embedding output, the final norm, the logits with the loss's
fp32 upcast (`catalogue/records/ends.yaml`, docs/planning.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speccat.catalogue.errors import ReasonError
from speccat.catalogue.datafile import read_yaml, version_of
from speccat.catalogue.records.expr import Expr, ExprError
from speccat.catalogue.records.exprloader import ExprLoader
from speccat.catalogue.records.names import LAYER_NAMES, KindValues, bind, kind_values
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.priced import stack_counts
from speccat.catalogue.vocabulary import END_PARTS, LOGIT_FACTS

ENDS_PATH = Path(__file__).with_name("ends.yaml")


class EndsError(ReasonError):
    group = "records"


@dataclass(frozen=True)
class Ends:
    """`ends.yaml` read: one price expression per end."""

    parts: Mapping[str, Expr]
    unmeasured: Mapping[str, float]  # the logit facts of a spec that states no ends
    version: str


def load_ends(records: Records, path: str | Path | None = None) -> Ends:
    """Read `ends.yaml`: one expression per end, over the names a layer of `records` reads."""
    path = Path(path) if path is not None else ENDS_PATH
    loader = ExprLoader(path.name)
    loader.error = EndsError
    data = read_yaml(path, lambda reason, what: loader.fail(reason, "", what))
    top = loader.mapping("", data, ("parts", "unmeasured"), ("parts", "unmeasured"))
    unmeasured = loader.mapping("unmeasured", top["unmeasured"], LOGIT_FACTS, LOGIT_FACTS)
    for fact, value in unmeasured.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise loader.fail("bad_value", f"unmeasured.{fact}", f"must be a non-negative integer, got {value!r}")
    body = loader.mapping("parts", top["parts"], END_PARTS, END_PARTS)
    known = frozenset(LAYER_NAMES) | frozenset(records.derived) | frozenset(records.defaults) | {"V", *LOGIT_FACTS}
    parts = {}
    for name in END_PARTS:
        parts[name] = loader.expr(f"parts.{name}", body[name], known)
    return Ends(parts, {fact: float(v) for fact, v in unmeasured.items()}, version_of(data))


def end_prices(spec: Mapping, records: Records, grid, ends: Ends, skip: frozenset[str] = frozenset()) -> list[dict]:
    """The catalogue's `end_prices` rows of `spec`: per setting of `grid` (but those in `skip`,
    where the model cannot be laid out), the bytes each end keeps (one rank, one micro-batch)."""
    kv = _first_kind(spec)
    return [
        {"setting_id": setting["setting_id"], **_priced(spec, kv, records, setting, grid.dtype_bytes, ends)}
        for setting in grid.settings
        if setting["setting_id"] not in skip
    ]


def price_ends_at(spec: Mapping, records: Records, setting: Mapping, dtype_bytes: Mapping[str, int], ends: Ends) -> dict[str, float]:
    """Bytes each end keeps at `setting` (one rank, one micro-batch), read with the first kind's names."""
    return _priced(spec, _first_kind(spec), records, setting, dtype_bytes, ends)


def _first_kind(spec: Mapping) -> KindValues:
    return kind_values(spec, next(iter(stack_counts(spec))))


def _priced(spec: Mapping, kv: KindValues, records: Records, setting: Mapping, dtype_bytes: Mapping[str, int], ends: Ends) -> dict[str, float]:
    names: Any = bind(kv, setting, dtype_bytes, records)
    names["V"] = float(spec["vocab_size"])
    measured = spec.get("ends")
    names.update({fact: float(measured[fact]) for fact in LOGIT_FACTS} if measured else ends.unmeasured)
    try:
        return {name: float(expr(names)) for name, expr in ends.parts.items()}
    except ExprError as err:
        raise EndsError("bad_value", f"ends: {err}") from None
