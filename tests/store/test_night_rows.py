"""A night's per-config rows (point, end and loss prices, op costs and shares) may be held as
Arrow tables, as the flow holds them: as mappings, a first night of 480 configs held 1.8 million
op_costs rows in the flow's process. Either way the store checks them alike and publishes the same
catalogue (catalogue/store/night.py)."""

from __future__ import annotations

import contextlib
import dataclasses

import pyarrow as pa
import pytest
from support import store_runs as runs

from speccat.catalogue.store.file import open_readonly, publish
from speccat.catalogue.store.night import StoreError
from speccat.flows.tasks import ROW_TABLES


def as_arrow(night):
    """`night` with each config's rows of every per-config table as one Arrow table."""
    return dataclasses.replace(night, **{name: {h: pa.Table.from_pylist(list(rows)) for h, rows in getattr(night, name).items()}
                                         for name in ROW_TABLES})  # fmt: skip


def test_rows_held_as_arrow_publish_the_same_catalogue(tmp_path):
    night = runs.first_run()
    # One config whose every point states no backward peak: its Arrow column is all nulls (type
    # null), the others' are numbers; the night's table takes the numbers' type.
    first = sorted(night.point_prices)[0]
    points = {**night.point_prices, first: [{**r, "backward_peak_per_token": None} for r in night.point_prices[first]]}
    night = dataclasses.replace(night, point_prices=points)
    arrowed = as_arrow(night)
    assert pa.types.is_null(arrowed.point_prices[first].schema.field("backward_peak_per_token").type)

    publish(tmp_path / "mappings.duckdb", night)
    publish(tmp_path / "arrow.duckdb", arrowed)
    with contextlib.closing(open_readonly(tmp_path / "mappings.duckdb")) as con:
        expected = runs.dump(con)
        nulls = con.execute("SELECT count(*) FILTER (WHERE backward_peak_per_token IS NULL), count(*) FROM point_prices").fetchone()
    with contextlib.closing(open_readonly(tmp_path / "arrow.duckdb")) as con:
        assert runs.dump(con) == expected
    assert nulls[0] == len(points[first]) and nulls[1] > nulls[0]
    assert sum(len(rows) for rows in night.op_costs.values()) == len(expected["op_costs"]) > 0


def test_rows_held_as_arrow_are_checked_as_mappings_are():
    night = as_arrow(runs.first_run())
    config_hash, costs = sorted(night.op_costs.items())[0]
    twice = pa.concat_tables([costs, costs.slice(0, 1)])  # one op costed twice
    with pytest.raises(StoreError) as err:
        dataclasses.replace(night, op_costs={**night.op_costs, config_hash: twice}).arrow_tables()
    assert err.value.reason == "bad_run" and f"op_costs[{config_hash!r}]" in str(err.value)

    lacking = night.loss_prices[config_hash].drop_columns(["working_bytes"])
    with pytest.raises(StoreError) as err:
        dataclasses.replace(night, loss_prices={**night.loss_prices, config_hash: lacking}).validate()
    assert err.value.reason == "bad_run" and "working_bytes" in str(err.value)
