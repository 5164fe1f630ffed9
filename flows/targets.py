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


@dataclass(frozen=True)
class FileTarget:
    """The catalogue file, published by an atomic rename (catalogue/store/file.py)."""

    path: str

    def __str__(self) -> str:
        return self.path

    def stored(self, census_version: str, records_version: str, setting_ids):
        from speccat.catalogue.store.file import stored

        return stored(self.path, census_version, records_version, setting_ids)

    def load_specs(self, census_version: str, config_hashes) -> dict[str, dict]:
        from speccat.catalogue.store.file import load_specs

        return load_specs(self.path, census_version, config_hashes)

    def publish(self, night: NightData) -> None:
        from speccat.catalogue.store.file import publish

        publish(self.path, night)


@dataclass(frozen=True)
class LakeTarget:
    """A DuckLake: a SQL catalog plus Parquet files, one transaction per night (catalogue/store/lake.py)."""

    catalog: str
    data_path: str

    def __str__(self) -> str:
        return f"ducklake:{self.catalog} ({self.data_path})"

    @property
    def lake(self):
        from speccat.catalogue.store.lake import Lake

        return Lake(self.catalog, self.data_path)

    def stored(self, census_version: str, records_version: str, setting_ids):
        from speccat.catalogue.store.lake import stored

        return stored(self.lake, census_version, records_version, setting_ids)

    def load_specs(self, census_version: str, config_hashes) -> dict[str, dict]:
        from speccat.catalogue.store.lake import load_specs

        return load_specs(self.lake, census_version, config_hashes)

    def publish(self, night: NightData) -> None:
        from speccat.catalogue.store.lake import publish_lake

        publish_lake(self.lake, night)


def make_target(db: str, lake: str | None = None, lake_data: str | None = None):
    if lake is None:
        if lake_data is not None:
            raise ValueError("--lake-data needs --lake (the lake's catalog)")
        return FileTarget(db)
    if not lake_data:
        raise ValueError("--lake needs --lake-data (where the lake's Parquet files go)")
    return LakeTarget(lake, lake_data)
