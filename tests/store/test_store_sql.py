"""sql/: the loader, the renderer, the views in dependency order, and each view's header naming
its grain and every column it has, with a unit."""

from __future__ import annotations

import re

import duckdb
import pytest

from speccat import sql
from speccat.catalogue.store.schema import create_schema, create_views

# The units a view's header may give a column (docs/catalogue.md, Views).
UNITS = {"bytes", "bytes/token", "tokens", "count", "ratio", "percent", "flops", "id", "version", "code", "text", "flag", "time", "seconds", "list"}
COLUMN_LINE = re.compile(r"^ {2}(?P<column>\w+) +(?P<unit>\S+) +(?P<meaning>\S.*)$")


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    create_schema(con)
    create_views(con)
    yield con
    con.close()


def header_columns(view: str) -> dict[str, str]:
    """column -> unit, from the `Columns:` part of the view file's header."""
    lines = sql.header(f"views/{view}").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Columns:")]
    assert len(starts) == 1, f"sql/views/{view}.sql has no Columns: section"
    out = {}
    for line in lines[starts[0] + 1 :]:
        match = COLUMN_LINE.match(line)
        assert match, f"sql/views/{view}.sql: {line!r} is not '  column  unit  meaning'"
        out[match["column"]] = match["unit"]
    return out


@pytest.mark.parametrize("view", sorted(sql.views()))
def test_each_view_states_its_grain_and_every_column_with_a_unit(con, view):
    header = sql.header(f"views/{view}")
    assert header.startswith(f"View {view}: "), header.splitlines()[0]
    assert re.search(r"^Grain: one row", header, re.M), f"sql/views/{view}.sql states no grain"
    described = [r[0] for r in con.execute(f"DESCRIBE {view}").fetchall()]
    documented = header_columns(view)
    assert list(documented) == described
    assert set(documented.values()) <= UNITS, set(documented.values()) - UNITS


def test_views_come_after_the_views_they_read():
    order = list(sql.views())
    assert order.index("latest_run") < order.index("latest_specs")
    assert order.index("spec_params") < order.index("latest_specs")
    assert order.index("model_prices") < order.index("repo_prices")
    assert order.index("previous_run") < order.index("changes")
    assert set(order) == {p.stem for p in sql.VIEWS_DIR.glob("*.sql")}


def test_tables_read_follows_the_macros_and_views_a_file_names():
    # sql/steps/fits_on.sql names rank_layouts and latest_run; the prices, the schedules and the
    # runs it reads only through them (rank_layouts -> rank_stages; latest_run -> runs).
    direct = re.sub(r"--[^\n]*", "", sql.load("steps/fits_on"))
    through = {"full_prices", "switch_costs", "layer_prices", "op_costs", "schedules", "state_sharding", "runs"}
    assert not any(re.search(rf"\b{table}\b", direct) for table in through)
    read = sql.tables_read("steps/fits_on")
    assert through <= read
    assert {"fits_on_layouts", "fits_on_sizes", "specs"} <= read
    # Tables no statement of the search names are not read, nor one its comments name alone.
    assert not {"crawls", "repo_history", "measured", "point_prices"} & read
    assert "failures" not in read
    assert "repo_history" in sql.tables_read("views/latest_specs")
    assert "runs" in sql.tables_read("views/latest_specs")


def test_views_read_the_grid_defaults_from_the_catalogue():
    chosen = sql.load("views/chosen_settings")
    for field in ("seq_length", "micro_batch", "tp", "cp", "dropless_tok_factor"):
        assert f"coalesce(getvariable('{field}'), (SELECT {field} FROM setting_defaults))" in chosen
    for name, text in {**sql.views(), **{q: p.read_text() for q, p in sql.queries().items()}}.items():
        code = re.sub(r"--[^\n]*", "", text)
        assert "4096" not in code, name


def test_every_statement_file_is_a_statement():
    for path in sql.SQL_DIR.rglob("*.sql"):
        code = re.sub(r"--[^\n]*", "", path.read_text()).strip()
        assert code.endswith(";"), path


def test_render_fills_quoted_names_only():
    assert sql.render("steps/use", catalog="incoming") == sql.load("steps/use").replace(
        "{{ identifier(catalog) }}", '"incoming"'
    )
    carried = sql.render("steps/carry_table", table="runs", columns=["a", 'b"c'], source="old")
    assert 'INSERT INTO "runs" ("a", "b""c")' in carried and 'FROM "old"."runs"' in carried
    assert "'it''s'" in sql.render("steps/load_extension", path="it's")


@pytest.mark.parametrize(
    "values, error",
    [
        ({}, KeyError),  # a slot left open
        ({"table": "runs", "extra": "x"}, KeyError),  # a value without a slot
        ({"table": 3}, TypeError),  # not text
    ],
)
def test_render_refuses_what_the_template_does_not_say(values, error):
    with pytest.raises(error):
        sql.render("steps/count_rows", **values)


def test_render_refuses_a_list_where_one_name_belongs_and_the_reverse():
    with pytest.raises(TypeError):
        sql.render("steps/count_rows", table=["runs"])
    with pytest.raises(TypeError):
        sql.render("steps/carry_table", table="runs", columns="a", source="old")
