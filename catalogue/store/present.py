"""Running catalogue queries with parameters, and printing results for people or programs.

Queries read their parameters with DuckDB's `getvariable('name')` (sql/queries/*.sql), so the
same file runs in the duckdb CLI after `SET VARIABLE name = value;` and here through `params`.
Results print as a readable table (bytes in MiB/GiB, lists joined), as CSV or as JSON.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import duckdb

from speccat import sql

FORMATS = ("table", "csv", "json")
# Columns that hold a byte count; the table format prints them in binary units.
BYTE_COLUMNS = frozenset({"attention", "ffn", "norm", "total", "kept", "saved", "model_total"})


@dataclass(frozen=True)
class Result:
    columns: tuple[str, ...]
    rows: list[tuple]


def resolve_query(text_or_name: str) -> str:
    """SQL from a file path, a query name of sql/queries (`fits_budget`), or the SQL itself."""
    path = Path(text_or_name)
    if path.suffix == ".sql" and path.is_file():
        return path.read_text()
    named = sql.queries()
    if text_or_name in named:
        return named[text_or_name].read_text()
    if any(c.isspace() for c in text_or_name.strip()):
        return text_or_name
    raise ValueError(
        f"{text_or_name!r} is neither a .sql file, SQL text, nor a query name; queries: {', '.join(named)}"
    )


def parse_params(pairs: Sequence[str]) -> dict[str, Any]:
    """NAME=VALUE pairs; values that read as integers or numbers become those."""
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"--param {pair!r}: expected NAME=VALUE with NAME an identifier")
        params[name] = _typed(value)
    return params


def run(con: duckdb.DuckDBPyConnection, text: str, params: Mapping[str, Any] | None = None) -> Result:
    """Set each parameter as a DuckDB variable, run the SQL (the last statement's result).

    A parameter whose value is None is set to NULL: the queries then use their default."""
    for name, value in (params or {}).items():
        con.execute(sql.render("steps/set_variable", name=name), {"value": value})
    cursor = con.execute(text)
    if cursor.description is None:
        return Result((), [])
    return Result(tuple(d[0] for d in cursor.description), cursor.fetchall())


def render(result: Result, fmt: str = "table") -> str:
    if fmt == "json":
        return json.dumps([dict(zip(result.columns, _plain(r))) for r in result.rows], indent=1, allow_nan=False) + "\n"
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows(_plain(r) for r in result.rows)
        return buffer.getvalue()
    if fmt == "table":
        return table(result.columns, [[cell(c, v) for c, v in zip(result.columns, r)] for r in result.rows])
    raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")


def table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain text table: a header, a rule, text cells left-aligned and numbers right-aligned."""
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    numeric = [bool(rows) and all(_looks_numeric(r[i]) for r in rows) for i in range(len(columns))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, widths, numeric)).rstrip()

    out = [line(columns), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out) + "\n"


def human_bytes(value: float | None) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 (B, KiB, MiB, GiB, TiB)."""
    if value is None:
        return ""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    exponent = 0 if value < 1024 else min(int(math.log(value, 1024)), len(units) - 1)
    scaled = value / 1024**exponent
    return f"{scaled:.0f} B" if exponent == 0 else f"{scaled:.2f} {units[exponent]}"


def cell(column: str, value: Any) -> str:
    if value is None:
        return ""
    if column in BYTE_COLUMNS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return human_bytes(value)
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _plain(row: Sequence[Any]) -> list[Any]:
    return [v.isoformat() if isinstance(v, (datetime, date)) else v for v in row]


def _looks_numeric(text: str) -> bool:
    head = text.split(" ")[0].replace(",", "")
    try:
        float(head)
    except ValueError:
        return text == ""
    return True


def _typed(value: str) -> Any:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value
