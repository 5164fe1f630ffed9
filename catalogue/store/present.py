"""Running catalogue queries with parameters, and printing results for people or programs.

Queries read their parameters with DuckDB's `getvariable('name')` (sql/queries/*.sql), so the
same file runs in the duckdb CLI after `SET VARIABLE name = value;` and here through `params`.
Results print as a readable table (bytes in one unit rule, `format_bytes`; lists joined), as
CSV or as JSON. A query's parameters are the variables it reads, directly or through the views
it names (`parameters`); a `-p NAME` it never reads is refused, not silently ignored.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import duckdb

from speccat import sql
from speccat.catalogue.errors import InputError
from speccat.catalogue.store.units import BINARY, PRINTED

FORMATS = ("table", "csv", "json")
# Columns that hold a byte count; the table format prints them by the unit rule (units.PRINTED).
BYTE_COLUMNS = frozenset({"attention", "ffn", "norm", "total", "kept", "saved", "model_total"})
# getvariable('name') in a query; names starting with _ are the query's own constants.
_VARIABLE = re.compile(r"getvariable\(\s*'([A-Za-z][A-Za-z0-9_]*)'\s*\)")
# How many near ids a miss suggests.
SUGGESTIONS = 3


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
    if path.suffix == ".sql":
        raise InputError("not_found", f"no query file {text_or_name}")
    near = difflib.get_close_matches(text_or_name, list(named), SUGGESTIONS)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise InputError(
        "not_found", f"{text_or_name!r} is neither a .sql file, SQL text, nor a query name; queries: {', '.join(named)}{hint}"
    )


def parameters(text: str) -> set[str]:
    """The variables a query reads: its own getvariable('NAME') calls and those of every view it
    names (sql/views/), through the views those read. Names starting with _ are constants a
    query sets itself, not parameters."""
    views = sql.views()
    seen: set[str] = set()
    names: set[str] = set()
    pending = [text]
    while pending:
        body = re.sub(r"--[^\n]*", "", pending.pop())
        names.update(_VARIABLE.findall(body))
        for view, view_text in views.items():
            if view not in seen and re.search(rf"\b{view}\b", body):
                seen.add(view)
                pending.append(view_text)
    return {n for n in names if not n.startswith("_")}


def check_params(text: str, params: Mapping[str, Any]) -> None:
    """Refuse a parameter the query never reads (InputError "unknown_parameter"), naming those it reads."""
    known = parameters(text)
    unknown = sorted(set(params) - known)
    if unknown:
        near = {n: difflib.get_close_matches(n, sorted(known), 1) for n in unknown}
        hints = "; ".join(f"{n} (did you mean {m[0]}?)" if m else n for n, m in near.items())
        raise InputError(
            "unknown_parameter",
            f"the query reads no parameter {hints}; it reads: {', '.join(sorted(known)) or 'none'}",
        )


def resolve_repo_id(con: duckdb.DuckDBPyConnection, typed: str) -> str:
    """The stored repo id `typed` names: exactly, else ignoring case when that names one repo.
    A miss is InputError "not_found" with the nearest stored ids; several case-insensitive
    matches are "ambiguous"."""
    ids = [r[0] for r in con.execute(sql.load("show/repo_ids")).fetchall()]
    if typed in ids:
        return typed
    same = [i for i in ids if i.lower() == typed.lower()]
    if len(same) == 1:
        return same[0]
    if same:
        raise InputError("ambiguous", f"{typed} matches {', '.join(same)} when case is ignored; type one exactly")
    lowered = {i.lower(): i for i in ids}
    near = [lowered[m] for m in difflib.get_close_matches(typed.lower(), list(lowered), SUGGESTIONS, 0.6)]
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise InputError("not_found", f"no repo {typed} in the catalogue ({len(ids)} repos){hint}")


def parse_params(pairs: Sequence[str]) -> dict[str, Any]:
    """NAME=VALUE pairs; values that read as integers or numbers become those."""
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise InputError("bad_argument", f"--param {pair!r}: expected NAME=VALUE with NAME an identifier")
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


def render(result: Result, fmt: str = "table", units: str = "human") -> str:
    if fmt == "json":
        return json.dumps([dict(zip(result.columns, _plain(r))) for r in result.rows], indent=1, allow_nan=False) + "\n"
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows(_plain(r) for r in result.rows)
        return buffer.getvalue()
    if fmt == "table":
        return table(result.columns, [[cell(c, v, units) for c, v in zip(result.columns, r)] for r in result.rows])
    raise InputError("bad_argument", f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")


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


def format_bytes(value: float | None, units: str = "human") -> str:
    """A byte figure by the one unit rule: `human` (human_bytes), `bytes` (an integer with
    thousands separators), or KiB/MiB/GiB with two decimals."""
    if value is None:
        return ""
    if units not in PRINTED:
        raise InputError("bad_argument", f"unknown units {units!r}; units: {', '.join(PRINTED)}")
    scale = PRINTED[units]
    if scale is None:
        return human_bytes(value)
    if scale == 1:
        return f"{value:,.0f} B"
    return f"{value / scale:,.2f} {units}"


def human_bytes(value: float | None) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 (B, KiB, MiB, GiB, TiB)."""
    if value is None:
        return ""
    units, base = tuple(BINARY), BINARY["KiB"]
    exponent = 0 if value < base else min(int(math.log(value, base)), len(units) - 1)
    scaled = value / base**exponent
    return f"{scaled:.0f} B" if exponent == 0 else f"{scaled:.2f} {units[exponent]}"


def cell(column: str, value: Any, units: str = "human") -> str:
    if value is None:
        return ""
    if column in BYTE_COLUMNS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_bytes(value, units)
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
