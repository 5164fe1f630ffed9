"""SQL built by the CLI takes user input as parameters, never as SQL text (issue 7, item 4).

`speccat query` runs the SQL its user writes (read-only): that is its purpose. Everything else
the user types (a repo id, a --param value, a file or folder path) reaches DuckDB as a bound
parameter or through the quoting helpers. Hostile inputs, each of which would change the
statement if it were pasted into the SQL, are shown to change nothing; and a tripwire lists
every f-string handed to DuckDB with what it may interpolate.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import store_runs as runs
from test_cli_catalogue import db, speccat  # noqa: F401 (db is a fixture: the two-night catalogue)

from speccat.catalogue.store.export import MANIFEST

ROOT = Path(__file__).resolve().parent.parent
REPO = "Qwen/Qwen3-8B"  # stored by night 2 of tests/store_runs.py
TAUTOLOGY = "x' OR '1'='1"


def test_a_repo_id_that_is_sql_matches_no_repo(db, capsys):
    code, out, _ = speccat(capsys, "show", REPO, "--db", db, "--json")
    assert code == 0 and json.loads(out)["repo"]["repo_id"] == REPO  # the control: a real id is found
    # Pasted into `WHERE repo_id = '...'`, the tautology would match every repo.
    code, out, err = speccat(capsys, "show", TAUTOLOGY, "--db", db)
    assert (code, out) == (1, "")
    assert "has no spec" in err


def test_a_parameter_value_that_is_sql_is_a_value(db, capsys):
    # 2^8 switch sets of the one setting masks_ranked reads, for a repo that is stored.
    code, out, _ = speccat(capsys, "query", "masks_ranked", "-p", f"repo_id={REPO}", "--db", db, "--format", "json")
    assert code == 0 and len(json.loads(out)) == 2 ** len(runs.records().switches)
    # The query looks the repo up first and names the value it did not find: the whole text.
    code, out, err = speccat(capsys, "query", "masks_ranked", "-p", f"repo_id={TAUTOLOGY}", "--db", db, "--format", "json")
    assert (code, out) == (1, "")
    assert f"repo_id {TAUTOLOGY} has no config in the catalogue" in err


def test_a_parameter_name_that_is_sql_is_refused(db, capsys):
    before = speccat(capsys, "query", "SELECT count(*) AS n FROM runs", "--db", db, "--format", "json")[1]
    code, out, err = speccat(capsys, "query", "masks_ranked", "-p", "repo_id = 'x'; DROP TABLE runs; --=1", "--db", db)
    assert (code, out) == (1, "")
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

# What an f-string handed to DuckDB may interpolate besides sql_literal(...) and
# sql_identifier(...) calls, file by file, and why none of it comes from a user.
INTERPOLATED = {
    "catalogue/store/export.py": {"name"},  # a table name from the constants PARTITIONED and WHOLE
    "catalogue/store/present.py": {"name"},  # a --param name, refused unless str.isidentifier() (above)
    "catalogue/store/lake.py": {"LAKE", "t"},  # the constant alias; a table name from TABLES
    "catalogue/store/file.py": {"INCOMING", "t", "name", "table", "columns"},  # constants; names from TABLES; columns quoted by sql_identifier
}
QUOTING = {"sql_literal", "sql_identifier"}


def _interpolations(path: Path) -> set[str]:
    """What the f-strings passed to `.execute(...)` in `path` interpolate, other than quoting calls."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("execute", "sql", "query")):
            continue
        for arg in node.args[:1]:
            if not isinstance(arg, ast.JoinedStr):
                continue
            for part in arg.values:
                if isinstance(part, ast.FormattedValue):
                    value = part.value
                    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in QUOTING:
                        continue
                    found.add(ast.unparse(value))
    return found


def test_every_interpolation_into_sql_is_listed():
    sources = sorted(p for folder in ("catalogue", "flows") for p in (ROOT / folder).glob("*.py"))
    found = {p.relative_to(ROOT).as_posix(): _interpolations(p) for p in sources}
    assert {f: names for f, names in found.items() if names} == INTERPOLATED
