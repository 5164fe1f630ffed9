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
(a config_hash column) a batch's rows at a time, the others whole (read from the publish once);
the answer is appended
to the publish's fits_on, inside its transaction. The catalogue in memory is bounded by
`fits_on_memory_mib` and spills to a directory of its own.

A batch's rows are not read from the publish's tables by a query per batch: each query scanned
the whole table, so the publish grew with the square of its specs (a first night of 480 specs
spent over 20 minutes reading them). Each table is scanned once instead, into Parquet files
partitioned by batch in a directory of the publish's, and a batch reads its own files.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from speccat import sql
from speccat.catalogue.store.bounds import LIMITS, bound, spill_directory
from speccat.catalogue.store.schema import create_schema, create_views, database_name, ingest, table_columns

log = logging.getLogger(__name__)

ANSWERED = "fits_on"
BATCHES, BATCH_COLUMN = "fits_on_batches", "fits_on_batch"  # the relation of (config_hash, batch number), and its column


def answer_fits_on(con: duckdb.DuckDBPyConnection) -> None:
    """Append to the default catalog's table fits_on the rows of every spec that lacks them
    (sql/steps/fits_on_pending.sql: a new spec, or all of them when the questions changed),
    answered from the catalog's merged rows a batch at a time."""
    pending = [h for (h,) in con.execute(sql.load("steps/fits_on_pending")).fetchall()]
    if not pending:
        return
    size = int(LIMITS["fits_on_batch_specs"])
    batches = [pending[start : start + size] for start in range(0, len(pending), size)]
    with spill_directory(prefix="speccat-fits-on-") as spill, spill_directory(prefix="speccat-fits-on-rows-") as rows:

        def catalogue(whole: dict[str, pa.Table]) -> duckdb.DuckDBPyConnection:
            planning = duckdb.connect()
            bound(planning, spill, LIMITS["fits_on_memory_mib"])
            create_schema(planning)
            create_views(planning)
            for table, table_rows in whole.items():
                ingest(planning, table, table_rows)
            return planning

        read = sql.tables_read("steps/fits_on") - {ANSWERED}
        with contextlib.closing(catalogue({})) as empty:
            columns = table_columns(empty, database_name(empty))
        per_spec = sorted(table for table in read if "config_hash" in columns[table])
        whole = {table: con.execute(sql.render("steps/table_rows", table=table)).to_arrow_table() for table in sorted(read - set(per_spec))}
        write_by_batch(con, per_spec, batches, rows)
        for number, batch in enumerate(batches):
            started = time.perf_counter()
            held = {table: pq.read_table(part) for table in per_spec if (part := rows / table / f"{BATCH_COLUMN}={number}").is_dir()}
            answer_batch(con, lambda: catalogue(whole), batch, held)
            log.info("fits_on: batch %d of %d (%d specs) in %.1f s", number + 1, len(batches), len(batch), time.perf_counter() - started)


def answer_batch(con: duckdb.DuckDBPyConnection, catalogue: Callable[[], duckdb.DuckDBPyConnection], batch: list[str],
                 held: dict[str, pa.Table]) -> None:  # fmt: skip
    """Answer `batch` in a new `catalogue()` from its rows `held` (table -> rows of the batch's
    specs, or of more) and append the answer to `con`'s fits_on; a batch whose search runs out of
    the memory bound is answered in two halves instead, down to one spec. How much the search
    holds depends on the specs (their layouts and kinds), not only on their number: on the Hub
    stand-in, one batch of 8 of 480 configs ran out of 2 GiB where 48 shipped configs never had.

    Each batch gets a catalogue of its own: in one kept for the whole night, its tables emptied
    after each batch, the search grew slower batch by batch (on that night, one spec a batch: 1.1
    s for the first 40 specs, 3.8 s by the 200th, where a new catalogue took 0.3 to 1.8 s for the
    same specs); probably because DuckDB keeps a table's column statistics after its rows are
    deleted, and planned each batch's joins for every spec it had held (not measured)."""
    with contextlib.closing(catalogue()) as planning:
        try:
            for table, rows in held.items():
                ingest(planning, table, rows.filter(pc.is_in(rows["config_hash"], value_set=pa.array(batch, rows["config_hash"].type))))
            planning.execute(sql.load("steps/fits_on_batch"), {"config_hashes": batch})
            planning.execute(sql.load("steps/fits_on"))
            answer = planning.execute(sql.render("steps/table_rows", table=ANSWERED)).to_arrow_table()
        except duckdb.OutOfMemoryException:
            if len(batch) == 1:
                raise
            answer = None
    if answer is None:
        log.warning("fits_on: %d specs ran out of %s MiB; answering them in two halves", len(batch), LIMITS["fits_on_memory_mib"])
        half = len(batch) // 2
        answer_batch(con, catalogue, batch[:half], held)
        answer_batch(con, catalogue, batch[half:], held)
        return
    ingest(con, ANSWERED, answer)


def write_by_batch(con: duckdb.DuckDBPyConnection, tables: list[str], batches: list[list[str]], folder: Path) -> None:
    """The rows of `tables` that belong to the specs of `batches`, as Parquet files
    folder/TABLE/fits_on_batch=K/ for batch K: each table scanned once (sql/steps/fits_on_rows.sql)."""
    numbers = pa.table({"config_hash": [h for batch in batches for h in batch],
                        BATCH_COLUMN: [k for k, batch in enumerate(batches) for _ in batch]})  # fmt: skip
    con.register(BATCHES, numbers)
    try:
        for table in tables:
            con.execute(sql.render("steps/fits_on_rows", table=table, batches=BATCHES, path=str(folder / table)))
    finally:
        con.unregister(BATCHES)
