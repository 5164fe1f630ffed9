"""Pricing the model's ends: the embedding output, the final norm, the logits with the loss's
fp32 upcast (`catalogue/records/head.yaml`, docs/planning.md)."""

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

HEAD_PATH = Path(__file__).with_name("head.yaml")


class HeadError(ReasonError):
    group = "records"


@dataclass(frozen=True)
class Head:
    parts: Mapping[str, Expr]
    unmeasured: Mapping[str, float]  # the logit facts of a spec that states no ends
    version: str


def load_head(records: Records, path: str | Path | None = None) -> Head:
    """Read `head.yaml`: one expression per end, over the names a layer of `records` reads."""
    path = Path(path) if path is not None else HEAD_PATH
    loader = ExprLoader(path.name)
    loader.error = HeadError
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
    return Head(parts, {fact: float(v) for fact, v in unmeasured.items()}, version_of(data))


def end_prices(spec: Mapping, records: Records, grid, head: Head, skip: frozenset[str] = frozenset()) -> list[dict]:
    """The catalogue's `end_prices` rows of `spec`: per setting of `grid` (but those in `skip`,
    where the model cannot be laid out), the bytes each end keeps (one rank, one micro-batch)."""
    kv = _first_kind(spec)
    return [
        {"setting_id": setting["setting_id"], **_price_ends(spec, kv, records, setting, grid.dtype_bytes, head)}
        for setting in grid.settings
        if setting["setting_id"] not in skip
    ]


def price_head(spec: Mapping, records: Records, setting: Mapping, dtype_bytes: Mapping[str, int], head: Head) -> dict[str, float]:
    """Bytes each end keeps at `setting` (one rank, one micro-batch), read with the first kind's names."""
    return _price_ends(spec, _first_kind(spec), records, setting, dtype_bytes, head)


def _first_kind(spec: Mapping) -> KindValues:
    return kind_values(spec, next(iter(stack_counts(spec))))


def _price_ends(spec: Mapping, kv: KindValues, records: Records, setting: Mapping, dtype_bytes: Mapping[str, int], head: Head) -> dict[str, float]:
    names: Any = bind(kv, setting, dtype_bytes, records)
    names["V"] = float(spec["vocab_size"])
    ends = spec.get("ends")
    names.update({fact: float(ends[fact]) for fact in LOGIT_FACTS} if ends else head.unmeasured)
    try:
        return {name: float(expr(names)) for name, expr in head.parts.items()}
    except ExprError as err:
        raise HeadError("bad_value", f"head: {err}") from None
