"""The catalogue's SQL, laid out as a dbt-style project, and the loader Python reads it through.

    schema/vocabulary.sql   the vocabulary table, filled from catalogue/vocabulary.yaml first
    schema/types.sql        the ENUM types, made from the vocabulary table
    schema/tables/*.sql     one file per table
    macros/*.sql            one file per table macro: a query over a relation the caller names
                            (the planner's rules, which a view and `speccat fit` both read)
    views/*.sql             one file per view; its header states the grain and every column
    steps/*.sql             what the store runs: staging, derive, conflicts, merge, checks,
                            the plan stage's lookups, export, the catalog plumbing, and
                            `speccat fit`'s reads of its catalogue in memory
    queries/*.sql           the analysts' example queries (`speccat query NAME`)
    show/*.sql              what `speccat show` prints
    report/*.sql            what `speccat report` draws, one catalogue-wide query each

Every statement speccat runs against the catalogue lives in a .sql file here. Python chooses
a file and passes values: parameters bound by DuckDB (`$name`), or the names a template
leaves open, which `render` fills with quoted identifiers and literals only. A template
writes `{{ identifier(NAME) }}`, `{{ identifiers(NAME) }}` (a comma-separated list) or
`{{ literal(NAME) }}`; nothing else can be substituted, so no caller can splice in SQL text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from importlib import resources
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent
QUERIES_DIR = SQL_DIR / "queries"
VIEWS_DIR = SQL_DIR / "views"
MACROS_DIR = SQL_DIR / "macros"
TABLES_DIR = SQL_DIR / "schema" / "tables"

# {{ identifier(name) }}, {{ identifiers(name) }} or {{ literal(name) }}; anything else in
# double braces is refused.
_SLOT = re.compile(r"\{\{\s*(?P<kind>[a-z]+)\((?P<name>[a-z_][a-z0-9_]*)\)\s*\}\}")
_ANY_SLOT = re.compile(r"\{\{.*?\}\}", re.S)
_COMMENT = re.compile(r"--[^\n]*")


@cache
def load(name: str) -> str:
    """The text of sql/<name>.sql, e.g. `load("steps/merge")`, `load("schema/types")`."""
    return resources.files(__name__).joinpath(f"{name}.sql").read_text()


def render(template: str, /, **values: str | Iterable[str]) -> str:
    """sql/<template>.sql with its open names filled: each value is quoted as the template
    says (an identifier, a list of identifiers, or a string literal). A name the template
    leaves open must be given, and a name given must be open in the template."""
    text = load(template)
    for slot in _ANY_SLOT.findall(text):
        if not _SLOT.fullmatch(slot):
            raise ValueError(f"sql/{template}.sql: {slot!r} is not a slot render fills")
    used: set[str] = set()

    def fill(match: re.Match) -> str:
        kind, key = match["kind"], match["name"]
        if key not in values:
            raise KeyError(f"sql/{template}.sql needs a value for {key!r}")
        used.add(key)
        value = values[key]
        if kind == "identifier":
            return sql_identifier(_text(template, key, value))
        if kind == "literal":
            return sql_literal(_text(template, key, value))
        if kind == "identifiers":
            if isinstance(value, str):
                raise TypeError(f"sql/{template}.sql: {key!r} is a list of names, got one string")
            names = [_text(template, key, v) for v in value]
            if not names:
                raise ValueError(f"sql/{template}.sql: {key!r} names no identifier")
            return ", ".join(sql_identifier(v) for v in names)
        raise ValueError(f"sql/{template}.sql: unknown slot kind {kind!r} (identifier, identifiers, literal)")

    out = _SLOT.sub(fill, text)
    unused = sorted(set(values) - used)
    if unused:
        raise KeyError(f"sql/{template}.sql has no slot for {unused}")
    return out


def sql_identifier(identifier: str) -> str:
    """A double-quoted SQL identifier: any text, safely one name."""
    return '"' + identifier.replace('"', '""') + '"'


def sql_literal(text: str) -> str:
    """A single-quoted SQL string literal: any text, safely one value."""
    return "'" + text.replace("'", "''") + "'"


def schema() -> str:
    """The schema script after the vocabulary table is filled: the ENUM types, then every
    table of schema/tables/ (each statement IF NOT EXISTS, so it runs on a copy alike)."""
    return "\n".join([load("schema/types")] + [load(f"schema/tables/{t}") for t in tables()])


def tables() -> tuple[str, ...]:
    """The tables schema/tables/ declares, by name (the file stem), sorted."""
    return tuple(p.stem for p in sorted(TABLES_DIR.glob("*.sql")))


def views() -> dict[str, str]:
    """Every view's CREATE statement by name, in dependency order: a view comes after the
    views it reads (found by name in its SQL, comments left out), ties by name."""
    return _in_dependency_order({p.stem: load(f"views/{p.stem}") for p in sorted(VIEWS_DIR.glob("*.sql"))})


def macros() -> dict[str, str]:
    """Every table macro's CREATE statement by name, sorted."""
    return {p.stem: load(f"macros/{p.stem}") for p in sorted(MACROS_DIR.glob("*.sql"))}


def definitions() -> dict[str, str]:
    """Every macro's and view's CREATE statement by name, in the order they can be created:
    each after the views and macros its SQL names (DuckDB binds a view, and a macro's call of
    another macro, when it is created)."""
    return _in_dependency_order({**macros(), **views()})


def tables_read(name: str) -> frozenset[str]:
    """The tables of schema/tables/ that sql/<name>.sql names, directly or through the macros
    and views it names, found by name as `definitions` finds what a view reads (comments left
    out; a word that is also a table's name counts, so the answer may hold more, never less)."""
    texts, stored = definitions(), set(tables())
    seen: set[str] = set()
    todo = [load(name)]
    while todo:
        text = _COMMENT.sub("", todo.pop())
        for other in [*texts, *stored]:
            if other not in seen and re.search(rf"\b{other}\b", text):
                seen.add(other)
                if other in texts:
                    todo.append(texts[other])
    return frozenset(seen & stored)


def _in_dependency_order(texts: dict[str, str]) -> dict[str, str]:
    """`texts` (name -> SQL) ordered so that each comes after the others its SQL names
    (comments left out), ties by name."""
    reads = {
        name: {other for other in texts if other != name and re.search(rf"\b{other}\b", _COMMENT.sub("", text))}
        for name, text in texts.items()
    }
    ordered: dict[str, str] = {}
    while len(ordered) < len(texts):
        ready = [n for n in texts if n not in ordered and reads[n] <= ordered.keys()]
        if not ready:
            raise ValueError(f"these read each other in a cycle: {sorted(set(texts) - ordered.keys())}")
        ordered[ready[0]] = texts[ready[0]]
    return ordered


def queries() -> dict[str, Path]:
    """The analysts' example queries, by name (the file stem), sorted."""
    return {p.stem: p for p in sorted(QUERIES_DIR.glob("*.sql"))}


def _text(template: str, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"sql/{template}.sql: {key!r} must be text, got {type(value).__name__}")
    return value


def header(name: str) -> str:
    """The leading comment block of sql/<name>.sql, without the `-- ` marks."""
    lines = []
    for line in load(name).splitlines():
        if not line.startswith("--"):
            break
        lines.append(line[2:].removeprefix(" "))
    return "\n".join(lines)
