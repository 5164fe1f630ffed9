"""The table fits_on answered for the specs that lack its rows, a batch of specs at a time, each
batch in a catalogue in memory of its own beside the publish.

The planner's search (sql/steps/fits_on.sql over sql/macros/) holds every layout, setting and
switch set of its specs at once, so it runs a batch of limits.yaml `fits_on_batch_specs` specs
at a time: a first night of thousands of specs would otherwise need memory in proportion.

It runs on its own connection, not the publish's, because a lake's publish is one transaction
(one snapshot) and DuckDB plans over rows a transaction has not committed without their
statistics: over a first night's uncommitted prices the search picked join orders that took 8
times as long and spilled gigabytes (35 s against 4.3 s for 8 specs; docs/planning.md). So the
tables the search reads (`sql.tables_read`) are copied through Arrow into an in-memory
catalogue with the same schema, macros and views, committed there: the tables kept per spec
(a config_hash column) a batch's rows at a time, the others whole once; the answer is appended
to the publish's fits_on, inside its transaction. The catalogue in memory is bounded by
`fits_on_memory_mib` and spills to a directory of its own.
"""

from __future__ import annotations

import contextlib

import duckdb

from speccat import sql
from speccat.catalogue.store.bounds import LIMITS, bound, spill_directory
from speccat.catalogue.store.schema import create_schema, create_views, database_name, ingest, table_columns

ANSWERED = "fits_on"


def answer_fits_on(con: duckdb.DuckDBPyConnection) -> None:
    """Append to the default catalog's table fits_on the rows of every spec that lacks them
    (sql/steps/fits_on_pending.sql: a new spec, or all of them when the questions changed),
    answered from the catalog's merged rows a batch at a time."""
    pending = [h for (h,) in con.execute(sql.load("steps/fits_on_pending")).fetchall()]
    if not pending:
        return
    size = int(LIMITS["fits_on_batch_specs"])
    with spill_directory(prefix="speccat-fits-on-") as spill, contextlib.closing(duckdb.connect()) as planning:
        bound(planning, spill, LIMITS["fits_on_memory_mib"])
        create_schema(planning)
        create_views(planning)
        read = sql.tables_read("steps/fits_on") - {ANSWERED}
        columns = table_columns(planning, database_name(planning))
        per_spec = frozenset(table for table in read if "config_hash" in columns[table])
        for table in sorted(read - per_spec):
            ingest(planning, table, con.execute(sql.render("steps/table_rows", table=table)).to_arrow_table())
        for start in range(0, len(pending), size):
            batch = pending[start : start + size]
            for table in sorted(per_spec):
                rows = con.execute(sql.render("steps/spec_rows", table=table), {"config_hashes": batch}).to_arrow_table()
                ingest(planning, table, rows)
            planning.execute(sql.load("steps/fits_on_batch"), {"config_hashes": batch})
            planning.execute(sql.load("steps/fits_on"))
            ingest(con, ANSWERED, planning.execute(sql.render("steps/table_rows", table=ANSWERED)).to_arrow_table())
            for table in sorted(per_spec | {ANSWERED}):
                planning.execute(sql.render("steps/clear_table", table=table))

