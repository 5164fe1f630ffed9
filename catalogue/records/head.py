"""Pricing the model's ends: the embedding output, the final norm, the logits with the loss's
fp32 upcast (`catalogue/records/head.yaml`, docs/planning.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speccat.catalogue.errors import ReasonError
from speccat.catalogue.records.datafile import Loader, read_yaml, version_of
from speccat.catalogue.records.expr import Expr, ExprError
from speccat.catalogue.records.names import LAYER_NAMES, layer_names
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.priced import stack_counts

HEAD_PATH = Path(__file__).with_name("head.yaml")
HEAD_PARTS = ("embedding", "final_norm", "logits")
NORM_NAMES = ("bytes_norm_out", "bytes_norm_weight")


class HeadError(ReasonError):
    group = "records"


@dataclass(frozen=True)
class Head:
    parts: Mapping[str, Expr]
    norm: Mapping[str, Mapping[str, Expr]]  # family (or "default") -> the final norm's widths
    version: str


def load_head(path: str | Path | None = None) -> Head:
    path = Path(path) if path is not None else HEAD_PATH
    loader = Loader(path.name)
    loader.error = HeadError
    data = read_yaml(path, lambda reason, what: loader.fail(reason, "", what))
    top = loader.mapping("", data, ("parts", "norm"), ("parts", "norm"))
    body = loader.mapping("parts", top["parts"], HEAD_PARTS, HEAD_PARTS)
    parts = {}
    for name in HEAD_PARTS:
        try:
            expr = Expr(str(body[name]))
        except ExprError as err:
            raise loader.fail("bad_expression", f"parts.{name}", f"{err.reason}: {err}") from None
        unknown = expr.names - LAYER_NAMES - {"V", *NORM_NAMES}
        if unknown:
            raise loader.fail("unknown_name", f"parts.{name}", f"reads {sorted(unknown)}, which no layer supplies")
        parts[name] = expr
    norm: dict[str, dict[str, Expr]] = {}
    families = top["norm"]
    if not isinstance(families, Mapping) or "default" not in families:
        raise loader.fail("missing_key", "norm.default", "the final norm's widths for every other family")
    for family, body in families.items():
        body = loader.mapping(f"norm.{family}", body, NORM_NAMES, NORM_NAMES)
        norm[str(family)] = {}
        for name in NORM_NAMES:
            try:
                expr = Expr(str(body[name]))
            except ExprError as err:
                raise loader.fail("bad_expression", f"norm.{family}.{name}", f"{err.reason}: {err}") from None
            if expr.names - LAYER_NAMES:
                raise loader.fail("unknown_name", f"norm.{family}.{name}", f"reads {sorted(expr.names - LAYER_NAMES)}")
            norm[str(family)][name] = expr
    return Head(parts, norm, version_of(data))


def price_head(spec: Mapping, defaults: Mapping, records: Records, setting: Mapping, dtype_bytes: Mapping[str, int], head: Head) -> dict[str, float]:
    """Bytes each end keeps at `setting` (one rank, one micro-batch), read with the first kind's names."""
    kind = next(iter(stack_counts(spec)))
    names: Any = layer_names(spec, kind, setting, defaults, records, dtype_bytes)
    names["V"] = float(spec["vocab_size"])
    family = defaults.get("family")
    for name, expr in head.norm.get(family, head.norm["default"]).items():
        names[name] = float(expr(names))
    try:
        return {name: float(expr(names)) for name, expr in head.parts.items()}
    except ExprError as err:
        raise HeadError("bad_value", f"head: {err}") from None
