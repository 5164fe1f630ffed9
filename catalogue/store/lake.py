"""Publishing into a DuckLake: the scale-out path (docs/catalogue.md, DuckLake).

A lake is a SQL catalog (SQLite locally, PostgreSQL in production, or a DuckDB file) plus
Parquet data files under a path. Several flow workers may publish into one lake at once: each
publish is one DuckLake transaction, which is one snapshot, so a reader sees a run whole or not
at all. The lake holds the catalogue's tables (sql/schema/ with ENUM columns as VARCHAR and
keys unenforced, as DuckLake has neither; sql/steps/checks.sql checks the keys) and its views.

Concurrency: DuckLake retries a commit whose changes do not conflict, and two appends to one
table never do, so two writers adding the same config could both add it. Every publish
therefore also increments the one row of `lake_epoch`: two overlapping publishes then conflict
(both rewrite that row), the later one fails to commit, and this module runs it again from a
fresh snapshot, where the merge sees what the other writer stored. The merge is the single
file's (sql/steps/merge.sql), so a reader of the lake sees the same rows as the single file.
`stored()` and `load_specs()` answer what a lake holds, as their namesakes in file.py do for
the file, so the flow skips what the lake already has.

The extensions come from PyPI packages (duckdb-extension-ducklake, and
duckdb-extension-sqlite-scanner for a SQLite catalog) and are loaded from their files: no
download, no network.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import random
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import duckdb

from speccat import sql
from speccat.catalogue.store.bounds import bound, spill_directory
from speccat.catalogue.store.night import NightData, StoreError
from speccat.catalogue.store.schema import create_views
from speccat.catalogue.store.file import (
    INCOMING,
    REFERENCE_TABLES,
    TABLES,
    Stored,
    count_rows,
    first_line,
    merge,
    specs_in,
    stage,
    stored_in,
)

LAKE = "lake"
# Extension name -> the PyPI package that ships its binary for this DuckDB version.
EXTENSION_PACKAGES = {
    "ducklake": "duckdb_extension_ducklake",
    "sqlite_scanner": "duckdb_extension_sqlite_scanner",
    "postgres_scanner": "duckdb_extension_postgres_scanner",
}
# DuckLake's own retry of non-conflicting commits, then ours of whole publishes.
ATTEMPTS = 30
FIRST_WAIT_S = 0.05


@dataclass(frozen=True)
class Lake:
    """Where a lake lives: `catalog` as DuckLake takes it after `ducklake:` (`sqlite:PATH`,
    `postgres:CONNINFO`, or a DuckDB file path) and the data path for its Parquet files."""

    catalog: str
    data_path: str

    @property
    def backend(self) -> str:
        head = self.catalog.split(":", 1)[0]
        return head if head in ("sqlite", "postgres") else "duckdb"


@dataclass(frozen=True)
class LakePublished:
    run_id: str
    attempts: int
    rows: dict[str, int]


def extension_path(name: str) -> Path:
    """The binary of extension `name` shipped by its PyPI package for the running DuckDB."""
    package = EXTENSION_PACKAGES[name]
    try:
        importlib.import_module(package)
    except ImportError:
        pip_name = package.replace("_", "-")
        raise StoreError("lake", f"the {name} extension needs the PyPI package {pip_name}=={duckdb.__version__}") from None
    path = Path(str(resources.files(package))) / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.is_file():
        raise StoreError("lake", f"{path} is missing: {package} must match duckdb {duckdb.__version__}")
    return path


def connect(lake: Lake, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the lake attached as `lake` (extensions loaded offline)."""
    con = duckdb.connect()
    con.execute(sql.render("steps/load_extension", path=str(extension_path("ducklake"))))
    if lake.backend == "sqlite":
        _prepare_sqlite(Path(lake.catalog.split(":", 1)[1]))
        con.execute(sql.render("steps/load_extension", path=str(extension_path("sqlite_scanner"))))
    elif lake.backend == "postgres":
        con.execute(sql.render("steps/load_extension", path=str(extension_path("postgres_scanner"))))
    attach = sql.render(
        "steps/attach_lake_readonly" if read_only else "steps/attach_lake",
        lake="ducklake:" + lake.catalog,
        catalog=LAKE,
        data_path=lake.data_path,
    )
    wait = FIRST_WAIT_S
    for n in range(1, ATTEMPTS + 1):
        try:
            con.execute(attach)
            return con
        except duckdb.Error as err:
            # Writers attaching a new lake at once race to create its metadata: the loser
            # finds the catalog locked and tries again, then finds the lake made.
            if n < ATTEMPTS and _lost_race(err):
                time.sleep(wait * (1 + random.random()))
                wait = min(wait * 1.5, 2.0)
                continue
            con.close()
            raise StoreError("lake", f"cannot attach the lake {lake.catalog}: {first_line(err)}") from None
    raise AssertionError("unreachable")


def publish(lake: Lake, night: NightData) -> LakePublished:
    """Store `night` into the lake in one transaction, retried while another writer wins."""
    night.validate()
    tables = night.arrow_tables()
    with spill_directory() as spill, contextlib.closing(connect(lake)) as con:
        bound(con, spill)
        stage(con, night, tables)
        _retrying(con, lambda: _create_tables(con))
        attempts = _retrying(con, lambda: _merge_and_commit(con))
        con.execute(sql.render("steps/use", catalog=LAKE))
        rows = {t: count_rows(con, t) for t in TABLES}
    return LakePublished(night.run_id, attempts, rows)


@contextlib.contextmanager
def open_lake(lake: Lake) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection whose default catalog is the lake (tables and views)."""
    con = connect(lake, read_only=True)
    try:
        con.execute(sql.render("steps/use", catalog=LAKE))
        yield con
    finally:
        con.close()


def stored(
    lake: Lake, census_version: str, records_version: str, setting_ids: Iterable[str], libraries: Mapping[str, str] | None = None,
    overload_ids: Iterable[str] = (),
) -> Stored:
    """What the lake holds, as `store.stored()` tells it of the single file: config_hashes
    specced at `census_version` by `libraries` (None: any), and those priced at both versions at
    every one of `setting_ids` (and of `overload_ids`, a spec with routed experts). A lake not
    created yet, or never published into, holds nothing."""
    nothing = Stored(frozenset(), frozenset())
    held = catalog_file(lake)
    if held is not None and not held.exists():
        return nothing  # not created by reading it
    try:
        with open_lake(lake) as con:
            if not _published(con):
                return nothing
            return stored_in(con, census_version, records_version, setting_ids, libraries, overload_ids)
    except StoreError as err:
        # DuckLake's words for a catalog that holds no lake (a read-only attach creates none).
        if "does not exist" in str(err):
            return nothing
        raise


def load_specs(
    lake: Lake, census_version: str, config_hashes: Iterable[str] | None = None, libraries: Mapping[str, str] | None = None
) -> dict[str, dict]:
    """The lake's specs at a census version and `libraries` (all, or those named), as `store.load_specs()`."""
    with open_lake(lake) as con:
        return specs_in(con, census_version, config_hashes, libraries) if _published(con) else {}


def _published(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the attached lake has the catalogue's tables (a publish created them)."""
    tables = con.execute(sql.load("steps/table_names"), {"db": LAKE}).fetchall()
    return set(TABLES) <= {t for (t,) in tables}


def catalog_file(lake: Lake) -> Path | None:
    """The file of a SQLite or DuckDB catalog (None for a PostgreSQL one)."""
    if lake.backend == "sqlite":
        return Path(lake.catalog.split(":", 1)[1])
    if lake.backend == "duckdb":
        return Path(lake.catalog.removeprefix("duckdb:"))
    return None


def lake_ddl(con: duckdb.DuckDBPyConnection) -> list[str]:
    """CREATE TABLE statements for the lake's tables (the catalogue's and the reference
    tables), from the schema staged in `incoming` by sql/steps/lake_ddl.sql: ENUMs become
    VARCHAR, keys are left to sql/steps/checks.sql, NOT NULL is kept."""
    tables = list(TABLES + REFERENCE_TABLES)
    return [s for (s,) in con.execute(sql.load("steps/lake_ddl"), {"db": INCOMING, "tables": tables}).fetchall()]


def _create_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create what the lake lacks, and its views when their definitions or the tables' changed.

    Every CREATE OR REPLACE VIEW adds a version of the view to the catalog, kept for time travel:
    recreating the views every night would make them most of what a quiet night writes."""
    con.begin()
    con.execute(sql.render("steps/use", catalog=LAKE))
    statements = lake_ddl(con)
    for statement in statements:
        con.execute(statement)
    con.execute(sql.load("steps/lake_epoch"))
    con.execute(sql.load("steps/lake_views"))
    definitions = [*statements, *sql.definitions().values()]
    digest = hashlib.sha256("\n".join(definitions).encode()).hexdigest()
    if con.execute(sql.load("steps/lake_views_digest")).fetchall() != [(digest,)]:
        create_views(con)
        con.execute(sql.load("steps/lake_views_mark"), {"digest": digest})
    con.commit()


def _merge_and_commit(con: duckdb.DuckDBPyConnection) -> None:
    con.begin()
    con.execute(sql.render("steps/use", catalog=LAKE))
    merge(con)
    con.execute(sql.load("steps/lake_epoch_bump"))
    con.commit()


def _retrying(con: duckdb.DuckDBPyConnection, attempt) -> int:
    """Run `attempt` (one transaction) until it commits; returns how many tries it took.

    A lost race (another writer committed first: a conflict, or a catalog that is busy for a
    moment) rolls back and runs again, with a growing, jittered wait. Anything else is raised."""
    wait = FIRST_WAIT_S
    for n in range(1, ATTEMPTS + 1):
        try:
            attempt()
            return n
        except (duckdb.TransactionException, duckdb.IOException) as err:
            with contextlib.suppress(duckdb.Error):
                con.rollback()
            if n == ATTEMPTS or not _lost_race(err):
                raise StoreError("lake", f"commit failed after {n} attempt(s): {first_line(err)}") from None
            time.sleep(wait * (1 + random.random()))
            wait = min(wait * 1.5, 2.0)
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                con.rollback()
            raise
    raise AssertionError("unreachable")


def _lost_race(err: Exception) -> bool:
    """Whether an error says another writer got there first (worth trying again)."""
    text = str(err).lower()
    return "conflict" in text or "locked" in text or "busy" in text


def _prepare_sqlite(path: Path) -> None:
    """Create the SQLite catalog in WAL mode: readers then never block the committing writer
    (in the default rollback journal, one writer's open read fails another's commit)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
        if db.execute(sql.load("steps/sqlite_journal_mode")).fetchone()[0] != "wal":
            db.execute(sql.load("steps/sqlite_wal"))
