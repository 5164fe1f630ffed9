"""The catalogue's schema, macros and views made in a connection's default catalog, rows
appended to its tables from Arrow, and the schema read back: what every catalogue is built with
(the published file, a lake's staging, a catalogue in memory)."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from speccat import sql
from speccat.catalogue.vocabulary import vocabulary_rows

# The name an Arrow table is registered under while sql/steps/ingest.sql appends it.
ARROW_ROWS = "arrow_rows"
VOCABULARY_SCHEMA = pa.schema(
    [("list", pa.string()), ("code", pa.string()), ("position", pa.int32()), ("description", pa.string())]
)


def create_schema(con: duckdb.DuckDBPyConnection) -> None:
    """The catalogue's schema in the default catalog, which must not have it yet: the
    vocabulary table filled from catalogue/vocabulary.yaml, then the ENUM types made from it
    and every table (sql/schema/)."""
    con.execute(sql.load("schema/vocabulary"))
    ingest(con, "vocabulary", pa.Table.from_pylist(vocabulary_rows(), schema=VOCABULARY_SCHEMA))
    con.execute(sql.schema())


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """Create (or replace) every table macro of sql/macros/ and every view of sql/views/ in the
    default catalog, in dependency order."""
    for text in sql.definitions().values():
        con.execute(text)


def ingest(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> None:
    """Append an Arrow table to table `name` of the default catalog, columns matched by name."""
    if table.num_rows == 0:
        return
    con.register(ARROW_ROWS, table)
    try:
        con.execute(sql.render("steps/ingest", table=name, rows=ARROW_ROWS))
    finally:
        con.unregister(ARROW_ROWS)


def schema_signature(con: duckdb.DuckDBPyConnection, database: str) -> list[tuple]:
    """Every column of every table of `database` with its type (an ENUM's type lists its codes)."""
    return con.execute(sql.load("steps/schema_signature"), {"db": database}).fetchall()


def table_columns(con: duckdb.DuckDBPyConnection, database: str) -> dict[str, list[str]]:
    """Each table of `database` -> its columns, in order."""
    out: dict[str, list[str]] = {}
    for table, _, column, *_ in schema_signature(con, database):
        out.setdefault(table, []).append(column)
    return out


def database_name(con: duckdb.DuckDBPyConnection) -> str:
    """The connection's default catalog."""
    return con.execute(sql.load("steps/current_database")).fetchone()[0]
