"""A night's price tables on local disk instead of in memory.

One config's prices are about 86,000 rows of layer prices and as many switch costs (some 3 MB
of Arrow). A first night of thousands of configs would hold gigabytes of them, twice over: the
flow's results, then the staged tables a publish merges. So the flow writes each config's tables
to Parquet as its census returns (`spool`), and a NightData given a directory writes its keyed,
checked tables there too (`KeyedPrices`) and hands the store Arrow datasets over those files,
which DuckDB scans as it merges, within the publish's memory bound (catalogue/store/bounds.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

PARTS = ("layer_prices", "full_prices", "switch_costs")


class SpooledPrices(Mapping):
    """One config's price tables as Parquet files in `directory`, read like the PriceTables they
    were (catalogue/records/priced.py), one table at a time: part name -> pyarrow Table."""

    def __init__(self, directory: Path, parts: tuple[str, ...]):
        self.directory, self.parts = Path(directory), parts

    def __getitem__(self, part: str) -> pa.Table:
        if part not in self.parts:
            raise KeyError(part)
        return pq.read_table(self.directory / f"{part}.parquet")

    def __iter__(self) -> Iterator[str]:
        return iter(self.parts)

    def __len__(self) -> int:
        return len(self.parts)

    def __repr__(self) -> str:
        return f"SpooledPrices({str(self.directory)!r}, {self.parts})"


def spool(prices, directory: Path) -> SpooledPrices:
    """Write `prices` (a PriceTables or a mapping of part to table; a part may be None) into
    `directory`, which must not exist yet."""
    directory.mkdir(parents=True)
    written = []
    for part in PARTS:
        table = prices.get(part) if isinstance(prices, Mapping) else getattr(prices, part, None)
        if table is not None:
            pq.write_table(table, directory / f"{part}.parquet")
            written.append(part)
    return SpooledPrices(directory, tuple(written))


class KeyedPrices:
    """Where a NightData puts the night's keyed price tables, one part at a time: in memory, or,
    given a directory, appended to one Parquet file per part there and read back as datasets."""

    def __init__(self, schemas: Mapping[str, pa.Schema], directory: Path | None = None):
        self.schemas, self.directory = schemas, directory
        self.held: dict[str, list[pa.Table]] = {part: [] for part in schemas}
        self.writers: dict[str, pq.ParquetWriter] = {}

    def add(self, part: str, table: pa.Table) -> None:
        if self.directory is None:
            self.held[part].append(table)
            return
        if part not in self.writers:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.writers[part] = pq.ParquetWriter(self.directory / f"{part}.parquet", self.schemas[part])
        self.writers[part].write_table(table)

    def tables(self) -> dict[str, pa.Table | ds.Dataset]:
        """Each part as one table (in memory) or one dataset over its file (spooled); a part no
        config had is an empty table."""
        out = {}
        for part, schema in self.schemas.items():
            if part in self.writers:
                self.writers.pop(part).close()
                out[part] = ds.dataset(self.directory / f"{part}.parquet", schema=schema, format="parquet")
            else:
                out[part] = pa.concat_tables(self.held[part]) if self.held[part] else schema.empty_table()
        return out
