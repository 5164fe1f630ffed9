"""catalogue/store/spool.py: a night's prices written to disk as the flow gets them, and staged
from there, publish the same catalogue as the night held in memory."""

from __future__ import annotations

import contextlib
import dataclasses

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from support import store_runs as runs

from speccat.catalogue.store.file import open_readonly, publish
from speccat.catalogue.store.night import STAGED_PRICES, StoreError
from speccat.catalogue.store.spool import SpooledPrices, spool


def spooled(night, folder):
    """`night` with every config's prices spooled into `folder`, and its staging there too."""
    prices = {h: spool(p, folder / "prices" / h) for h, p in night.prices.items()}
    return dataclasses.replace(night, prices=prices, spool=str(folder))


def test_a_spooled_config_reads_back_as_its_tables(tmp_path):
    night = runs.first_run()
    config_hash, prices = sorted(night.prices.items())[0]
    back = spool(prices, tmp_path / config_hash)
    assert isinstance(back, SpooledPrices) and set(back) == set(STAGED_PRICES)
    for part in STAGED_PRICES:
        assert back[part].equals(getattr(prices, part))
    assert sorted(p.name for p in (tmp_path / config_hash).iterdir()) == sorted(f"{part}.parquet" for part in STAGED_PRICES)


def test_a_spooled_night_stages_datasets_and_publishes_the_same_catalogue(tmp_path):
    night = runs.first_run()
    held = night.arrow_tables()
    staged = spooled(night, tmp_path / "staged").arrow_tables()
    for part, schema in STAGED_PRICES.items():
        assert isinstance(held[part], pa.Table)
        assert isinstance(staged[part], ds.Dataset)  # read by DuckDB as it merges, never whole in memory
        assert staged[part].to_table().equals(held[part].cast(schema))
        assert held[part].num_rows > 0

    publish(tmp_path / "held.duckdb", night)
    publish(tmp_path / "spooled.duckdb", spooled(night, tmp_path / "spool"))
    with contextlib.closing(open_readonly(tmp_path / "held.duckdb")) as con:
        expected = runs.dump(con)
    with contextlib.closing(open_readonly(tmp_path / "spooled.duckdb")) as con:
        assert runs.dump(con) == expected


def test_a_spooled_config_missing_a_table_is_refused_as_one_held(tmp_path):
    night = runs.first_run()
    config_hash, prices = sorted(night.prices.items())[0]
    lacking = spool({"layer_prices": prices.layer_prices, "full_prices": prices.full_prices}, tmp_path / config_hash)
    bad = dataclasses.replace(night, prices={**night.prices, config_hash: lacking}, spool=str(tmp_path))
    with pytest.raises(StoreError) as err:
        bad.arrow_tables()
    assert err.value.reason == "bad_run"
    assert f"prices[{config_hash!r}].switch_costs" in str(err.value)
