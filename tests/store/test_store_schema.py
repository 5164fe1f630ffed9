"""sql/schema/ against the vocabulary its ENUM types are made from and the columns it mirrors."""

from __future__ import annotations

import re

import duckdb
import pytest

from speccat import sql
from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.settings import load_settings
from speccat.catalogue.store.file import REFERENCE_TABLES, SWITCH_SET_FIXED, TABLES, create_schema
from speccat.catalogue.vocabulary import ENUMS, FAILURE_REASONS, GATING, OPS, UNPRICED_OPS, vocabulary_rows


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    create_schema(con)
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


@pytest.mark.parametrize("name", sorted(ENUMS))
def test_each_enum_is_its_vocabulary_list(con, name):
    assert enum(con, name) == ENUMS[name]


def test_the_enums_are_the_vocabulary_lists():
    types = sql.load("schema/types")
    made = set(re.findall(r"CREATE TYPE IF NOT EXISTS (\w+) AS ENUM", types))
    assert made == set(ENUMS)


def test_the_vocabulary_table_holds_every_code_with_its_meaning(con):
    rows = con.execute("SELECT list, code, position, description FROM vocabulary ORDER BY list, position").fetchall()
    assert rows == sorted(((r["list"], r["code"], r["position"], r["description"]) for r in vocabulary_rows()),
                          key=lambda r: (r[0], r[2]))
    assert all(description for *_, description in rows)


def test_the_codes_a_python_caller_stores_are_enum_codes(con):
    assert enum(con, "reason") == FAILURE_REASONS
    assert set(GATING.values()) == set(enum(con, "gating"))
    assert enum(con, "op_name") == OPS + UNPRICED_OPS


def test_every_table_exists(con):
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert tables == set(TABLES) | set(REFERENCE_TABLES)
    assert set(sql.tables()) == tables - {"vocabulary"}  # vocabulary is made first, apart


def test_switch_columns_are_the_records_switches(con):
    switch_columns = [c for c in columns(con, "switch_sets") if c not in SWITCH_SET_FIXED]
    assert switch_columns == list(load_records().switches)


def test_settings_columns_are_the_grid_fields(con):
    assert columns(con, "settings") == ["setting_id", *load_settings().fields]


def test_setting_defaults_has_the_settings_columns_and_types(con):
    def typed(table):
        return con.execute(
            "SELECT column_name, data_type, is_nullable FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index",
            [table],
        ).fetchall()

    assert typed("setting_defaults") == typed("settings")


def test_op_count_columns_are_the_op_vector(con):
    kind_columns = columns(con, "kinds")
    assert [c for c in kind_columns if c in OPS] == list(OPS)


def test_schema_runs_twice(con):
    con.execute(sql.schema())  # every statement is IF NOT EXISTS
    assert len(columns(con, "runs")) == 18  # 16, plus a failed night's reason and message


def test_keys_are_enforced(con):
    con.execute("BEGIN")
    con.execute("INSERT INTO configs VALUES ('h', 'llama', '{}')")
    with pytest.raises(duckdb.ConstraintException):
        con.execute("INSERT INTO configs VALUES ('h', 'llama', '{}')")
    con.execute("ROLLBACK")


def test_unknown_reason_is_refused(con):
    with pytest.raises(duckdb.ConversionException):
        con.execute("INSERT INTO failures VALUES ('r', 'a/b', 'fetch', 'exploded', 'x')")
