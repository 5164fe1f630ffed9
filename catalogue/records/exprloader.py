"""The records room's data-file loader: catalogue/datafile.py's Loader, reading also expressions
of the records' language (catalogue/records/expr.py) over the names a file's formulas may read.
costs.yaml, ends.yaml and states.yaml are read through it."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from speccat.catalogue.datafile import Loader
from speccat.catalogue.records.expr import Expr, ExprError


class ExprLoader(Loader):
    """A Loader whose `expr` parses a field as an Expr reading only `known` names."""

    # An unknown name's refusal lists the names known (a file whose formulas read a short list,
    # states.yaml's layout sizes), else says no layer supplies it (the layer's many names).
    list_known: bool = False

    def expr(self, key: str, text: Any, known: Collection[str]) -> Expr:
        """`text` parsed: "bad_expression" when it is not an expression, "unknown_name" when it
        reads a name outside `known`."""
        try:
            expr = Expr(str(text))
        except ExprError as err:
            raise self.fail("bad_expression", key, f"{err.reason}: {err}") from None
        unknown = expr.names - set(known)
        if unknown:
            where = f"; known: {sorted(known)}" if self.list_known else ", which no layer supplies"
            raise self.fail("unknown_name", key, f"reads {sorted(unknown)}{where}")
        return expr
