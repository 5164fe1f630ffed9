"""Where a night is published: the single DuckDB file, or a DuckLake (docs/catalogue.md).

Both answer what they already hold (so the plan stage skips it) and publish a NightData.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from speccat.catalogue.store.night import NightData

# The catalogue file every command reads or publishes unless told otherwise.
DEFAULT_DB = "catalogue.duckdb"


class _Target:
    """What both targets answer, each through its store module (`_store()`, imported on first
    use) at its `where()`: the path of the file, or the Lake."""

    def stored(self, census_version: str, records_version: str, setting_ids):
        return self._store().stored(self.where(), census_version, records_version, setting_ids)

    def load_specs(self, census_version: str, config_hashes) -> dict[str, dict]:
        return self._store().load_specs(self.where(), census_version, config_hashes)

    def publish(self, night: NightData) -> None:
        self._store().publish(self.where(), night)


@dataclass(frozen=True)
class FileTarget(_Target):
    """The catalogue file, published by an atomic rename (catalogue/store/file.py)."""

    path: str

    def __str__(self) -> str:
        return self.path

    def _store(self):
        from speccat.catalogue.store import file

        return file

    def where(self) -> str:
        return self.path


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


def make_target(db: str, lake: str | None = None, lake_data: str | None = None):
    if lake is None:
        if lake_data is not None:
            raise ValueError("--lake-data needs --lake (the lake's catalog)")
        return FileTarget(db)
    if not lake_data:
        raise ValueError("--lake needs --lake-data (where the lake's Parquet files go)")
    return LakeTarget(lake, lake_data)
