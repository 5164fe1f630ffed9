"""The DuckDB catalogue: publish a run atomically, open the published file for reading.

`publish(db_path, night)` never writes the published file. Under a writer lock it builds the
next catalogue in a new file beside it (`.NAME.publish-PID-ID.tmp`): a copy of the published
file (or a rebuild into the schema of sql/schema/ when the schema changed), plus tonight's rows
merged by sql/steps/merge.sql. It then runs sql/steps/checks.sql, recreates the views of
sql/views/, checkpoints, fsyncs and renames the new file over the old one. A reader that has
the old file open keeps reading the old inode; a new reader sees the whole new run; a writer
killed at any point leaves the published file as it was, and the next publish removes the
leftover. Carried rows are never recomputed: the flow only censuses configs the catalogue
lacks and prices those not priced at every setting of its grid (`stored()` tells which).

DuckDB lets one process write a file or many read it, never both: readers use
`open_readonly()`, and in one process a connection to the published path must be closed before
the same process opens the new file (DuckDB caches open instances by path).

Every statement is a file of sql/ (docs/catalogue.md); this module passes it parameters, and
names quoted by `sql.render`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from speccat import sql
from speccat.catalogue.store.bounds import LIMITS, bound, spill_directory
from speccat.catalogue.store.fits_on_batches import answer_fits_on
from speccat.catalogue.store.comments import comment_views
from speccat.catalogue.errors import InputError
from speccat.catalogue.store.night import DATA_FILE_TABLES, STAGED_PRICES, NightData, StoreError
from speccat.catalogue.store.schema import create_schema, create_views, database_name, ingest, schema_signature, table_columns

# The catalogue's data tables, in the order the store rebuilds them (sql/schema/tables/):
# what a publish carries from the published catalogue into the next.
TABLES: tuple[str, ...] = (
    "runs",
    "repo_history",
    "repos",
    "configs",
    "specs",
    "kinds",
    "stack",
    "measured",
    "settings",
    "switch_sets",
    "layer_prices",
    "full_prices",
    "switch_costs",
    "infeasible_settings",
    "point_prices",
    "end_prices",
    "loss_prices",
    "op_costs",
    "op_prices",
    "fits_on",
    "failures",
    "crawls",
)
# Reference tables: tonight's, never carried: the vocabulary the ENUM types are made from
# (filled before the schema runs), the grid's default setting and the data files' tables the
# night states (night.py DATA_FILE_TABLES; sql/schema/).
REFERENCE_TABLES: tuple[str, ...] = ("vocabulary", "setting_defaults", *DATA_FILE_TABLES)
# Of those, the data files' tables with a primary key, which tonight's rows replace row by row
# (sql/steps/replace_reference.sql): the others have rules of their own in sql/steps/merge.sql.
KEYED_REFERENCE: tuple[str, ...] = (
    "state_sharding", "switch_ops", "switch_kept", "accelerators", "schedules", "losses", "framework_flags", "flag_sets",
    "param_rules",
)
# The columns that, beside census_version, say which libraries measured a spec (part of the key
# of every spec and price table).
LIBRARY_COLUMNS = frozenset({"transformers_version", "torch_version"})
# switch_sets columns that are not a switch.
SWITCH_SET_FIXED = ("mask", "n_recomputed", "switches", "name")
# The in-memory catalog tonight's rows are staged in; sql/steps/*.sql read it by this name.
INCOMING = "incoming"
# Catalogs a publish attaches for a moment: the current schema, the published file.
FRESH, OLD = "fresh", "old"
# DuckDB's words for a file another process holds: `... Conflicting lock is held in PROGRAM (PID N) ...`.
_LOCK_HELD = re.compile(r"Conflicting lock is held in (?P<program>.+?) \(PID (?P<pid>\d+)\)")


@dataclass(frozen=True)
class Published:
    """What a publish did: the path, the run, and the rows each table holds afterwards."""

    path: Path
    run_id: str
    rebuilt: bool
    rows: dict[str, int]


@dataclass(frozen=True)
class Stored:
    """What a catalogue already holds at one census version, records version and grid."""

    specs: frozenset[str]  # config_hashes with a spec at the census version
    priced: frozenset[str]  # config_hashes priced at both versions at every setting of the grid


def publish(db_path: str | os.PathLike, night: NightData, lock_wait: float | None = None) -> Published:
    """Store `night` into the catalogue at `db_path` and publish it atomically (module docstring).

    While another process holds the published file read-write, wait up to `lock_wait` seconds
    (default LIMITS["lock_wait_s"]), then refuse with StoreError("locked"), file untouched."""
    night.validate()
    tables = night.arrow_tables()
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(db_path):
        remove_leftovers(db_path)
        tmp = db_path.with_name(f".{db_path.name}.publish-{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        try:
            # A shared (read-only) hold on the published file while it is copied: no other
            # process can open it read-write, and so change it, until the copy is whole.
            with _held_for_copy(db_path, lock_wait):
                rebuilt = _start(db_path, tmp)
            with spill_directory(db_path.parent, f".{db_path.name}.publish-spill-") as spill, contextlib.closing(duckdb.connect(str(tmp))) as con:
                bound(con, spill)
                if rebuilt and db_path.exists():
                    _carry_into_new_schema(con, db_path)
                store_night(con, night, tables)
                comment_views(con)
                rows = {t: count_rows(con, t) for t in TABLES}
                con.execute(sql.load("steps/checkpoint"))
            _fsync(tmp)
            os.replace(tmp, db_path)
            _fsync(db_path.parent)
        except (duckdb.IOException, duckdb.FatalException, OSError) as err:
            raise StoreError(
                "write_failed", f"{db_path}: the new catalogue could not be written, the published one is unchanged: {first_line(err)}"
            ) from err
        finally:
            _remove_with_wal(tmp)
    return Published(path=db_path, run_id=night.run_id, rebuilt=rebuilt, rows=rows)


def open_readonly(db_path: str | os.PathLike, wait: float = 0.0) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the published catalogue (many readers may hold one at once).

    No file is StoreError("no_catalogue"), a folder or another kind of file InputError. While
    another process holds the file read-write, try again with backoff for up to `wait`
    seconds (readers pass 0: they answer at once), then StoreError("locked") naming the
    holder where DuckDB does."""
    path = Path(db_path)
    if path.is_dir():
        raise InputError("bad_argument", f"{path} is a folder, not a catalogue file")
    if not path.is_file():
        raise StoreError("no_catalogue", f"no catalogue at {path}; run `speccat refresh --db {path}` first")
    deadline = time.monotonic() + wait
    pause = LIMITS["lock_backoff_first_s"]
    while True:
        try:
            return duckdb.connect(str(path), read_only=True)
        except duckdb.IOException as err:
            held = _LOCK_HELD.search(str(err))
            if held is None:
                raise InputError("bad_argument", f"{path} is not a DuckDB catalogue: {first_line(err)}") from None
            if time.monotonic() + pause > deadline:
                waited = f" for {wait:g} s" if wait else ""
                raise StoreError(
                    "locked",
                    f"{path} is held read-write by another process ({held['program']}, PID {held['pid']}); "
                    f"gave up waiting{waited}; readers should open it read-only (duckdb -readonly); "
                    "the published catalogue is unchanged",
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, LIMITS["lock_backoff_max_s"])


@contextlib.contextmanager
def _held_for_copy(db_path: Path, lock_wait: float | None) -> Iterator[None]:
    if not db_path.exists():
        yield
        return
    con = open_readonly(db_path, LIMITS["lock_wait_s"] if lock_wait is None else lock_wait)
    try:
        yield
    finally:
        con.close()


def stored(
    db_path: str | os.PathLike, census_version: str, records_version: str, setting_ids: Iterable[str],
    lock_wait: float | None = None, libraries: Mapping[str, str] | None = None, overload_ids: Iterable[str] = (),
) -> Stored:
    """Which config_hashes the published catalogue has specced and priced at these versions and
    at every one of `setting_ids` (the current grid), and for a spec with routed experts at
    every one of `overload_ids` too (the grid's overload settings, `Grid.overload`): a config
    priced under an older grid that lacks some of them is not priced yet, so the flow prices its
    stored spec again.

    `libraries` ({"transformers": V, "torch": V}, tonight's) names the libraries a spec must have
    been measured by to count: they are part of its identity, so a night on a new transformers or
    torch holds nothing and censuses every config again. None counts a spec of any library.
    Waits for a process holding the file read-write as `publish` does."""
    if not Path(db_path).is_file():
        return Stored(frozenset(), frozenset())
    wait = LIMITS["lock_wait_s"] if lock_wait is None else lock_wait
    with contextlib.closing(open_readonly(db_path, wait)) as con:
        return stored_in(con, census_version, records_version, setting_ids, libraries, overload_ids)


def load_specs(
    db_path: str | os.PathLike, census_version: str, config_hashes: Iterable[str] | None = None,
    lock_wait: float | None = None, libraries: Mapping[str, str] | None = None,
) -> dict[str, dict]:
    """Stored specs at a census version and `libraries` (as `stored`; None: any), all or those
    named, as plain mappings.

    For pricing again (under new records or a new grid) without censusing again."""
    wait = LIMITS["lock_wait_s"] if lock_wait is None else lock_wait
    with contextlib.closing(open_readonly(db_path, wait)) as con:
        return specs_in(con, census_version, config_hashes, libraries)


def _library_parameters(libraries: Mapping[str, str] | None) -> dict[str, str | None]:
    libraries = libraries or {}
    return {"transformers": libraries.get("transformers"), "torch": libraries.get("torch")}


def stored_in(
    con: duckdb.DuckDBPyConnection, census_version: str, records_version: str, setting_ids: Iterable[str],
    libraries: Mapping[str, str] | None = None, overload_ids: Iterable[str] = (),
) -> Stored:
    """`stored()` on an open catalogue (the file's, or a lake's as its default catalog)."""
    parameters = {"census": census_version, "records": records_version, "grid": sorted(set(setting_ids)),
                  "overload": sorted(set(overload_ids))}  # fmt: skip
    try:
        rows = con.execute(sql.load("steps/stored"), {**parameters, **_library_parameters(libraries)}).fetchall()
    except duckdb.CatalogException:
        # A catalogue published before switch_costs existed: its specs are kept, nothing counts
        # as priced, so the flow prices each spec again and the store adds the costs.
        return Stored(frozenset(specs_in(con, census_version, None, libraries)), frozenset())
    except duckdb.BinderException:
        # A catalogue published before specs recorded their libraries: which library measured
        # each spec is not known to this query, so nothing is held and the flow censuses every
        # config again (the publish carries the old rows, their libraries inferred from runs).
        return Stored(frozenset(), frozenset())
    return Stored(*(frozenset(h for held, h in rows if held == kind) for kind in ("spec", "priced")))


def specs_in(
    con: duckdb.DuckDBPyConnection, census_version: str, config_hashes: Iterable[str] | None = None,
    libraries: Mapping[str, str] | None = None,
) -> dict[str, dict]:
    """`load_specs()` on an open catalogue (the file's, or a lake's as its default catalog)."""
    hashes = None if config_hashes is None else sorted(set(config_hashes))
    parameters = {"census": census_version, "hashes": hashes, **_library_parameters(libraries)}
    rows = con.execute(sql.load("steps/stored_specs"), parameters).fetchall()
    return {h: json.loads(spec) for h, spec in rows}


@contextlib.contextmanager
def writer_lock(db_path: Path) -> Iterator[None]:
    """One publisher per catalogue at a time: an flock on NAME.lock beside it.

    The kernel drops the lock when its holder dies, even by SIGKILL."""
    lock_path = db_path.with_name(db_path.name + ".lock")
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_leftovers(db_path: Path) -> list[Path]:
    """Remove the files of publishes that died (call only while holding the writer lock)."""
    leftovers = sorted(db_path.parent.glob(f".{db_path.name}.publish-*.tmp*"))
    for path in leftovers:
        if path.is_dir():  # where its DuckDB spilled
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return leftovers


def stage(con: duckdb.DuckDBPyConnection, night: NightData, tables: dict[str, pa.Table]) -> None:
    """Attach an in-memory `incoming` catalog with the schema and fill it with the run's rows.

    Every table is ingested from Arrow in one statement; the spec tables are derived from the
    staged spec JSON by sql/steps/derive.sql. Types, ENUM codes and keys are enforced here, so a
    bad code or a duplicate key in the run is refused before anything is merged. The price
    tables, millions of rows, are not copied: they are registered as `staged_layer_prices`,
    `staged_full_prices` and `staged_switch_costs` (NightData has checked each config's prices whole)."""
    home = database_name(con)
    con.execute(sql.render("steps/attach_memory", catalog=INCOMING))
    con.execute(sql.render("steps/use", catalog=INCOMING))
    try:
        create_schema(con)
        _check_fits_schema(con, night)
        con.execute(sql.load("steps/raw_tables"))
        for name, table in tables.items():
            if name in STAGED_PRICES:
                # Prices stay in Arrow: sql/steps/merge.sql appends the new groups straight from them.
                con.register(f"staged_{name}", table)
                continue
            try:
                ingest(con, name, table)
            except (duckdb.ConstraintException, duckdb.ConversionException, duckdb.BinderException) as err:
                raise StoreError("bad_run", f"{name}: {first_line(err)}") from None
        try:
            con.execute(sql.load("steps/derive"))
        except (duckdb.ConstraintException, duckdb.ConversionException) as err:
            raise StoreError("bad_run", f"specs: {first_line(err)}") from None
    finally:
        con.execute(sql.render("steps/use", catalog=home))


def store_night(con: duckdb.DuckDBPyConnection, night: NightData, tables: dict[str, pa.Table]) -> None:
    """Stage the night's rows, merge them into the default catalog (which has the schema) and
    (re)create its macros and views; the staging catalog is detached after."""
    stage(con, night, tables)
    create_views(con)
    merge(con)
    con.execute(sql.render("steps/detach", catalog=INCOMING))


def count_rows(con: duckdb.DuckDBPyConnection, table: str) -> int:
    """How many rows a table or view of the default catalog holds."""
    return con.execute(sql.render("steps/count_rows", table=table)).fetchone()[0]


def merge(con: duckdb.DuckDBPyConnection) -> None:
    """Refuse conflicting rows, merge `incoming` into the default catalog, then check it."""
    conflicts = con.execute(sql.load("steps/conflicts")).fetchall()
    if conflicts:
        listed = "; ".join(f"{t} {k}" for t, k in conflicts[:10])
        raise StoreError(
            "conflict",
            f"{len(conflicts)} stored row group(s) differ from this run's under the same key "
            f"(bump the census, records or settings version): {listed}",
        )
    con.execute(sql.load("steps/merge"))
    for table in KEYED_REFERENCE:
        ((key,),) = con.execute(sql.load("steps/primary_key"), {"catalog": INCOMING, "table": table}).fetchall()
        con.execute(sql.render("steps/replace_reference", table=table, source=INCOMING, key=key))
    problems = con.execute(sql.load("steps/checks")).fetchall()
    if problems:
        listed = "; ".join(f"{c}: {d}" for c, d in problems[:10])
        raise StoreError("check_failed", f"{len(problems)} problem(s): {listed}")
    answer_fits_on(con)


def _start(db_path: Path, tmp: Path) -> bool:
    """Create `tmp` as a copy of the published catalogue when its schema is current.

    Returns True when the new file must be rebuilt instead (a first publish, or a schema change:
    a new column, a new ENUM code), leaving `tmp` a fresh catalogue with the current schema."""
    if db_path.exists():
        shutil.copyfile(db_path, tmp)
        con = duckdb.connect(str(tmp))
        try:
            home = database_name(con)
            con.execute(sql.render("steps/attach_memory", catalog=FRESH))
            con.execute(sql.render("steps/use", catalog=FRESH))
            create_schema(con)
            current = schema_signature(con, FRESH) == schema_signature(con, home)
            con.execute(sql.render("steps/use", catalog=home))
            con.execute(sql.render("steps/detach", catalog=FRESH))
        finally:
            con.close()
        if current:
            return False
        _remove_with_wal(tmp)
    con = duckdb.connect(str(tmp))
    try:
        create_schema(con)
    finally:
        con.close()
    return True


def _carry_into_new_schema(con: duckdb.DuckDBPyConnection, old_path: Path) -> None:
    """Copy every row of the published catalogue into the new schema, column by column name.

    A column the new schema dropped, or a code an ENUM no longer has, is refused: nothing stored
    may be lost silently."""
    con.execute(sql.render("steps/attach_readonly", path=str(old_path), catalog=OLD))
    try:
        new = table_columns(con, database_name(con))
        old = table_columns(con, OLD)
        for table in TABLES:
            if table not in old:
                continue
            dropped = [c for c in old[table] if c not in new[table]]
            if dropped:
                raise StoreError("schema", f"{table}: the new schema drops column(s) {dropped}; stored values would be lost")
            # A spec or price table stored before the libraries were part of a spec's key: each
            # row gains the libraries of the night that censused it (sql/steps/carry_spec_table.sql).
            step = "steps/carry_spec_table" if LIBRARY_COLUMNS <= set(new[table]) - set(old[table]) else "steps/carry_table"
            try:
                con.execute(sql.render(step, table=table, columns=old[table], source=OLD))
            except (duckdb.ConversionException, duckdb.ConstraintException) as err:
                raise StoreError("schema", f"{table}: stored rows do not fit the new schema: {first_line(err)}") from None
    finally:
        con.execute(sql.render("steps/detach", catalog=OLD))


def _check_fits_schema(con: duckdb.DuckDBPyConnection, night: NightData) -> None:
    """Settings fields and switches must each have their column (run inside `incoming`)."""
    columns = table_columns(con, INCOMING)
    setting_columns = set(columns["settings"])
    if set(columns["setting_defaults"]) != setting_columns:
        raise StoreError("schema", "the setting_defaults table's columns are not the settings table's (sql/schema/tables/)")
    for i, setting in enumerate(night.settings):
        if set(setting) != setting_columns:
            raise StoreError(
                "schema",
                f"settings[{i}] fields {sorted(setting)} are not the settings table's columns "
                f"{sorted(setting_columns)} (sql/schema/tables/settings.sql)",
            )
    switch_columns = [c for c in columns["switch_sets"] if c not in SWITCH_SET_FIXED]
    if sorted(night.switches) != sorted(switch_columns):
        raise StoreError(
            "schema",
            f"switches {list(night.switches)} are not the switch_sets table's switch columns "
            f"{switch_columns} (sql/schema/tables/switch_sets.sql)",
        )


def first_line(err: Exception) -> str:
    """The first line of an error's message: DuckDB's errors run on with hints and context."""
    return str(err).strip().splitlines()[0]


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_with_wal(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)
