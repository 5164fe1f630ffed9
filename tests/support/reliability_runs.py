"""Helpers of the reliability tests: what a reader of the catalogue sees."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from speccat import sql
from speccat.catalogue.store import present
from speccat.catalogue.store.file import open_readonly


def answers(db: Path, repo_ids: tuple[str, ...]) -> dict[str, Any]:
    """The answers a reader gets from the published catalogue at `db`: the example queries
    (latest specs, each repo's ranked switch sets, priced against measured) and the
    whole-model prices. Equal answers before and after a fault mean the fault did not reach them."""
    queries = {name: path.read_text() for name, path in sql.queries().items()}
    with contextlib.closing(open_readonly(db)) as con:
        return {
            "latest_specs": sorted(present.run(con, queries["latest_specs"]).rows, key=str),
            "masks_ranked": {r: present.run(con, queries["masks_ranked"], {"repo_id": r}).rows for r in repo_ids},
            "priced_vs_measured": sorted(present.run(con, queries["priced_vs_measured"]).rows, key=str),
            "model_prices": con.execute("SELECT count(*), sum(total) FROM model_prices").fetchone(),
        }
