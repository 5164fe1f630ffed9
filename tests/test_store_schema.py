"""sql/schema.sql against the Python tuples its codes and columns mirror."""

from __future__ import annotations

import duckdb
import pytest

from speccat import sql
from speccat.catalogue.vocabulary import OPS, OTHER
from speccat.catalogue.vocabulary import FETCH_REASONS, GATING, RUN_STATUSES, SOURCES, STAGES
from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.settings import load_settings
from speccat.catalogue.store.file import SWITCH_SET_FIXED, TABLES
from speccat.census.spec import ATTENTION_FLAVOURS, FFN_FLAVOURS, REASONS


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    con.execute(sql.load("schema"))
    yield con
    con.close()


def enum(con, name: str) -> tuple[str, ...]:
    labels = con.execute(
        "SELECT labels FROM duckdb_types() WHERE type_name = ? AND logical_type = 'ENUM'", [name]
    ).fetchone()
    assert labels is not None, f"no ENUM {name}"
    return tuple(labels[0])


def columns(con, table: str) -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index", [table]
    ).fetchall()]


@pytest.mark.parametrize(
    "name, codes",
    [
        ("reason", REASONS + FETCH_REASONS),
        ("stage", STAGES),
        ("run_status", RUN_STATUSES),
        ("run_source", SOURCES),
        ("gating", tuple(GATING.values())),
        ("op_name", OPS + (OTHER,)),
        ("attention_flavour", ATTENTION_FLAVOURS),
        ("ffn_flavour", FFN_FLAVOURS),
    ],
)
def test_enum_matches_python_codes(con, name, codes):
    assert enum(con, name) == codes


def test_fetch_reasons_do_not_overlap_census_reasons():
    assert not set(FETCH_REASONS) & set(REASONS)


def test_every_design_table_exists(con):
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert tables == set(TABLES)


def test_switch_columns_are_the_records_switches(con):
    switch_columns = [c for c in columns(con, "switch_sets") if c not in SWITCH_SET_FIXED]
    assert switch_columns == list(load_records().switches)


def test_settings_columns_are_the_grid_fields(con):
    assert columns(con, "settings") == ["setting_id", *load_settings().fields]


def test_op_count_columns_are_the_op_vector(con):
    kind_columns = columns(con, "kinds")
    assert [c for c in kind_columns if c in OPS] == list(OPS)


def test_schema_runs_twice(con):
    con.execute(sql.load("schema"))  # every statement is IF NOT EXISTS
    assert len(columns(con, "runs")) == 16


def test_keys_are_enforced(con):
    con.execute("BEGIN")
    con.execute("INSERT INTO configs VALUES ('h', 'llama', '{}')")
    with pytest.raises(duckdb.ConstraintException):
        con.execute("INSERT INTO configs VALUES ('h', 'llama', '{}')")
    con.execute("ROLLBACK")


def test_unknown_reason_is_refused(con):
    with pytest.raises(duckdb.ConversionException):
        con.execute("INSERT INTO failures VALUES ('r', 'a/b', 'fetch', 'exploded', 'x')")
