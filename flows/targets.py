"""Where a night is published and read: the single DuckDB file, or a DuckLake (docs/catalogue.md).

Both answer what they already hold (so the plan stage skips it), publish a NightData, and open
read-only for the read commands (`speccat query`, `show`, `export`).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from speccat.catalogue.store.night import NightData

# The catalogue file every command reads or publishes unless told otherwise ...
DEFAULT_DB = "catalogue.duckdb"
# ... or unless this environment variable names another.
DB_ENV = "SPECCAT_DB"


def default_db() -> str:
    """The catalogue a command uses without --db: $SPECCAT_DB, else DEFAULT_DB."""
    return os.environ.get(DB_ENV) or DEFAULT_DB


class _Target:
    """What both targets answer, each through its store module (`_store()`, imported on first
    use) at its `where()`: the path of the file, or the Lake. `options()` are the store's
    keyword arguments."""

    def options(self) -> dict:
        return {}

    def stored(self, census_version: str, records_version: str, setting_ids, libraries=None, overload_ids=()):
        return self._store().stored(
            self.where(), census_version, records_version, setting_ids, libraries=libraries, overload_ids=overload_ids, **self.options()
        )

    def load_specs(self, census_version: str, config_hashes, libraries=None) -> dict[str, dict]:
        return self._store().load_specs(self.where(), census_version, config_hashes, libraries=libraries, **self.options())

    def publish(self, night: NightData) -> None:
        self._store().publish(self.where(), night, **self.options())


@dataclass(frozen=True)
class FileTarget(_Target):
    """The catalogue file, published by an atomic rename (catalogue/store/file.py)."""

    path: str
    lock_wait: float | None = None  # seconds to wait for a process holding the file (None: limits.yaml)

    def __str__(self) -> str:
        return self.path

    def _store(self):
        from speccat.catalogue.store import file

        return file

    def where(self) -> str:
        return self.path

    def options(self) -> dict:
        return {"lock_wait": self.lock_wait}

    @contextlib.contextmanager
    def open_readonly(self):
        """A read-only connection for the read commands; it never waits for a lock."""
        from speccat.catalogue.store.file import open_readonly

        with contextlib.closing(open_readonly(self.path)) as con:
            yield con


@dataclass(frozen=True)
class LakeTarget(_Target):
    """A DuckLake: a SQL catalog plus Parquet files, one transaction per night (catalogue/store/lake.py)."""

    catalog: str
    data_path: str

    def __str__(self) -> str:
        return f"ducklake:{self.catalog} ({self.data_path})"

    def _store(self):
        from speccat.catalogue.store import lake

        return lake

    def where(self):
        from speccat.catalogue.store.lake import Lake

        return Lake(self.catalog, self.data_path)

    @contextlib.contextmanager
    def open_readonly(self):
        """A read-only connection whose default catalog is the lake. A lake whose catalog file
        does not exist is StoreError("no_catalogue"): reading it creates nothing."""
        from speccat.catalogue.store.lake import catalog_file, open_lake
        from speccat.catalogue.store.night import StoreError

        held = catalog_file(self.where())
        if held is not None and not held.exists():
            raise StoreError("no_catalogue", f"no DuckLake catalog at {held}; publish one with `speccat refresh --lake`")
        with open_lake(self.where()) as con:
            yield con


def make_target(db: str | None = None, lake: str | None = None, lake_data: str | None = None, lock_wait: float | None = None):
    """The file at `db` (default: default_db()), or the lake `lake` with its data under `lake_data`."""
    from speccat.catalogue.errors import InputError

    if lake is None:
        if lake_data is not None:
            raise InputError("bad_argument", "--lake-data needs --lake (the lake's catalog)")
        return FileTarget(db or default_db(), lock_wait)
    if not lake_data:
        raise InputError("bad_argument", "--lake needs --lake-data (where the lake's Parquet files go)")
    return LakeTarget(lake, lake_data)
