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


def _blank_setting(rows, i):
    return [{**r, "setting_id": None} if j == i else r for j, r in enumerate(rows)]


def _with_field(rows, field, value, i=0):
    return [{**r, field: value} if j == i else r for j, r in enumerate(rows)]


@pytest.mark.parametrize(
    ("table", "spoil", "words"),
    [
        ("op_prices", lambda rows: _blank_setting(rows, 3), "[3].setting_id: is required"),
        ("op_costs", lambda rows: _with_field(rows, "flavour", "x"), "[0]: unknown field(s) ['flavour']"),
        ("op_prices", lambda rows: _with_field(rows, "kept_bytes", -1.0, 2), "bytes must be finite and not negative"),
        ("op_prices", lambda rows: rows[:-1], "must state every kind at every setting"),
        ("loss_prices", lambda rows: _with_field(rows, "working_bytes", float("inf")), "bytes must be finite and not negative"),
        ("end_prices", lambda rows: rows[1:], "must price the ends once at each setting"),
        ("op_costs", lambda rows: [r for r in rows if r["setting_id"] != rows[0]["setting_id"]], "must cost each op once"),
    ],
)
def test_a_spoilt_table_is_refused_alike_as_mappings_and_as_arrow(table, spoil, words):
    """Each refusal names the same table, config, row and field whichever way the rows are held."""
    night = runs.first_run()
    config_hash = sorted(getattr(night, table))[0]
    spoilt = dataclasses.replace(night, **{table: {**getattr(night, table), config_hash: spoil(list(getattr(night, table)[config_hash]))}})
    messages = []
    for held in (spoilt, as_arrow(spoilt)):
        with pytest.raises(StoreError) as err:
            held.validate()
            held.arrow_tables()
        messages.append(str(err.value))
    assert err.value.reason == "bad_run"
    assert messages[0] == messages[1] and f"{table}[{config_hash!r}]" in messages[0] and words in messages[0], messages
