"""The records' `working_set` section (records.yaml, docs/pricing.md "The backward peak") as
loaded: the bytes of each dtype's element, the width classes and the rules for a width no class
holds. catalogue/records/working.py prices a spec's stated working set with it."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from speccat.catalogue.records.expr import Expr

KEYS = ("dtypes", "classes", "unmatched_formed", "unmatched_freed", "tokens")
CLASS_KEYS = ("when", "width", "held")


@dataclass(frozen=True)
class WidthClass:
    when: Expr | None  # the kinds the class is for (None: every kind), as the census ran
    width: Expr  # its width: elements per token, as the census ran
    held: Expr  # the elements per token one rank holds of a tensor that wide, at the setting


@dataclass(frozen=True)
class WorkingSet:
    dtypes: Mapping[str, Expr]  # bytes an element of each dtype name the census states
    classes: tuple[WidthClass, ...]
    unmatched_formed: Expr  # the share one rank holds of a formed tensor of no class's width
    unmatched_freed: Expr  # and of a freed save of no class's width
    tokens: Expr  # one rank's tokens of a micro-batch


def parse_working_set(loader: Any, value: Any, known: Collection[str]) -> WorkingSet:
    """The records' `working_set` section, validated by the records loader `loader` (its
    `mapping`, `expr` and `fail`), every expression reading only `known` names."""
    body = loader.mapping("working_set", value, KEYS, KEYS)
    dtypes = body["dtypes"]
    if not isinstance(dtypes, Mapping) or "compute" not in dtypes:
        raise loader.fail("bad_value", "working_set.dtypes", "must map each dtype name, `compute` among them, to its bytes an element")
    classes = body["classes"]
    if not isinstance(classes, list) or not classes:
        raise loader.fail("bad_value", "working_set.classes", "must list the width classes")
    parsed = []
    for i, entry in enumerate(classes):
        key = f"working_set.classes[{i}]"
        entry = loader.mapping(key, entry, CLASS_KEYS, ("width", "held"))
        when = loader.expr(f"{key}.when", entry["when"], known) if "when" in entry else None
        parsed.append(WidthClass(when, loader.expr(f"{key}.width", entry["width"], known), loader.expr(f"{key}.held", entry["held"], known)))
    return WorkingSet(
        dtypes=MappingProxyType({str(name): loader.expr(f"working_set.dtypes.{name}", v, known) for name, v in dtypes.items()}),
        classes=tuple(parsed),
        unmatched_formed=loader.expr("working_set.unmatched_formed", body["unmatched_formed"], known),
        unmatched_freed=loader.expr("working_set.unmatched_freed", body["unmatched_freed"], known),
        tokens=loader.expr("working_set.tokens", body["tokens"], known),
    )
