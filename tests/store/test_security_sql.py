"""SQL built by the CLI takes user input as parameters, never as SQL text.

`speccat query` runs the SQL its user writes (read-only): that is its purpose. Everything else
the user types (a repo id, a --param value, a file or folder path) reaches DuckDB as a bound
parameter or quoted by `sql.render`. Hostile inputs, each of which would change the
statement if it were pasted into the SQL, are shown to change nothing; and a tripwire checks
that every statement handed to DuckDB is a file of sql/.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from support import store_runs as runs

from speccat.catalogue.store.export import MANIFEST
from speccat.flows.cli import main

ROOT = Path(__file__).resolve().parents[2]
REPO = "Qwen/Qwen3-8B"  # stored by night 2 of tests/support/store_runs.py
TAUTOLOGY = "x' OR '1'='1"


@pytest.fixture(scope="module")
def db() -> str:
    return str(runs.two_night_catalogue())


def speccat(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_repo_id_that_is_sql_matches_no_repo(db, capsys):
    code, out, _ = speccat(capsys, "show", REPO, "--db", db, "--json")
    assert code == 0 and json.loads(out)["repo"]["repo_id"] == REPO  # the control: a real id is found
    # Pasted into `WHERE repo_id = '...'`, the tautology would match every repo.
    code, out, err = speccat(capsys, "show", TAUTOLOGY, "--db", db)
    assert (code, out) == (2, "")
    assert err.startswith(f"speccat: not_found: no repo {TAUTOLOGY} in the catalogue")


def test_a_parameter_value_that_is_sql_is_a_value(db, capsys):
    # 2^8 switch sets of the one setting masks_ranked reads, for a repo that is stored.
    code, out, _ = speccat(capsys, "query", "masks_ranked", "-p", f"repo_id={REPO}", "--db", db, "--format", "json")
    assert code == 0 and sum(r["n_equivalent"] for r in json.loads(out)) == 2 ** len(runs.records().switches)
    # The query looks the repo up first and names the value it did not find: the whole text.
    code, out, err = speccat(capsys, "query", "masks_ranked", "-p", f"repo_id={TAUTOLOGY}", "--db", db, "--format", "json")
    error = json.loads(out)["error"]
    assert code == 2 and error["reason"] == "not_found" and f"no repo {TAUTOLOGY} in the catalogue" in error["message"]


def test_a_parameter_name_that_is_sql_is_refused(db, capsys):
    before = speccat(capsys, "query", "SELECT count(*) AS n FROM runs", "--db", db, "--format", "json")[1]
    code, out, err = speccat(capsys, "query", "masks_ranked", "-p", "repo_id = 'x'; DROP TABLE runs; --=1", "--db", db)
    assert (code, out) == (2, "")
    assert "NAME an identifier" in err and err.count("\n") == 1
    assert speccat(capsys, "query", "SELECT count(*) AS n FROM runs", "--db", db, "--format", "json")[1] == before


def test_an_export_folder_named_like_sql_is_only_a_folder(db, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a COPY smuggled into the path would write
    name = "out' (FORMAT csv); COPY (SELECT 42) TO 'smuggled.csv' (FORMAT csv); --"
    code, _, err = speccat(capsys, "export", str(tmp_path / name), "--db", db)
    assert code == 0, err
    manifest = json.loads((tmp_path / name / MANIFEST).read_text())
    assert manifest["tables"]["runs"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no smuggled.csv, no leftovers


def test_a_catalogue_path_with_quotes_is_a_path(db, capsys, tmp_path):
    path = tmp_path / "it's a \"catalogue\".duckdb"
    path.write_bytes(Path(db).read_bytes())
    code, out, _ = speccat(capsys, "query", "SELECT count(*) AS n FROM runs", "--db", str(path), "--format", "json")
    assert code == 0 and json.loads(out) == [{"n": 2}]


# -- the tripwire --------------------------------------------------------------------------

# Every statement handed to DuckDB (or SQLite) from catalogue/, census/ and flows/ is a file
# of sql/: `sql.load(NAME)`, `sql.render(NAME, ...)` (which quotes what it fills in) or
# `sql.schema()`. Anything else passed to `.execute` is listed here, file by file, with why
# it is not built from user input; an f-string or a literal would be listed, and fail.
PASSED = {
    "catalogue/store/schema.py": {"text"},  # a view's CREATE statement, from sql.views()
    "catalogue/store/lake.py": {"attach", "statement"},  # sql.render("steps/attach_lake..."); a CREATE TABLE sql/steps/lake_ddl.sql wrote
    "catalogue/store/present.py": {"text"},  # the SQL `speccat query` runs: its user's, by purpose (read-only)
}
SQL_CALLS = {"load", "render", "schema"}


def _passed(path: Path) -> set[str]:
    """What `path` passes to `.execute(...)` (and kin) other than a call into speccat.sql."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("execute", "executemany", "sql", "query")):
            continue
        for arg in node.args[:1]:
            if (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr in SQL_CALLS
                    and isinstance(arg.func.value, ast.Name) and arg.func.value.id == "sql"):
                continue
            found.add(ast.unparse(arg))
    return found


def test_every_statement_comes_from_sql_files():
    sources = sorted(p for folder in ("catalogue", "census", "flows") for p in (ROOT / folder).rglob("*.py"))
    found = {p.relative_to(ROOT).as_posix(): _passed(p) for p in sources}
    assert {f: names for f, names in found.items() if names} == PASSED


def test_render_quotes_what_it_fills_in():
    from speccat import sql

    hostile = 'x" ; DROP TABLE runs; --'
    text = sql.render("steps/count_rows", table=hostile)
    assert '"x"" ; DROP TABLE runs; --"' in text
    path = "out' (FORMAT csv); COPY (SELECT 42) TO 'smuggled.csv"
    assert "'out'' (FORMAT csv); COPY (SELECT 42) TO ''smuggled.csv'" in sql.render("steps/export_whole", table="runs", path=path)
