"""Column descriptions: each view's header (sql/views/*.sql, `Columns:`: column, unit, meaning)
as DuckDB column comments on the view, and as field metadata for the export's Parquet files.
The header is the one source: tests/test_store_sql.py keeps it equal to the view's columns."""

from __future__ import annotations

import re

import duckdb

from speccat import sql

COLUMN_LINE = re.compile(r"^\s+(?P<column>\S+)\s+(?P<unit>\S+)\s+(?P<meaning>.+)$")


def view_columns(view: str) -> dict[str, tuple[str, str]]:
    """column -> (unit, meaning), from the `Columns:` part of the view file's header."""
    lines = sql.header(f"views/{view}").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Columns:"))
    out = {}
    for line in lines[start + 1 :]:
        match = COLUMN_LINE.match(line)
        if match:
            out[match["column"]] = (match["unit"], match["meaning"])
    return out


def description(unit: str, meaning: str) -> str:
    return f"{meaning} [{unit}]"


def comment_views(con: duckdb.DuckDBPyConnection) -> None:
    """Comment every column of every view of sql/views/ with its header's meaning and unit."""
    for view in sql.views():
        for column, (unit, meaning) in view_columns(view).items():
            con.execute(sql.render("steps/comment_column", view=view, column=column, text=description(unit, meaning)))
