"""The catalogue's SQL: schema, derivations, merge, checks, views and the analysts' queries.

Every statement speccat runs against the catalogue lives in a .sql file here; Python only
chooses which file to run.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent
QUERIES_DIR = SQL_DIR / "queries"


def load(name: str) -> str:
    """The text of sql/<name>.sql (schema, derive, merge, checks, views, ...)."""
    return resources.files(__name__).joinpath(f"{name}.sql").read_text()


def queries() -> dict[str, Path]:
    """The analysts' example queries, by name (the file stem), sorted."""
    return {p.stem: p for p in sorted(QUERIES_DIR.glob("*.sql"))}
