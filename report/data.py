"""What the report draws, read from the catalogue's views through sql/report/*.sql.

Every query reads the repos the report draws (the relation `report_repos`: the most downloaded,
report/pages.yaml) and is filtered on one setting (and one switch set) with a variable, so the
views' scans of the prices read that setting only (docs/catalogue.md, "Views"); the rows are
then split by repo in memory. Two queries join the switch sets the report draws, which it
registers with DuckDB as the relation `report_sets` (an Arrow table) rather than writing SQL.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import pyarrow as pa

from speccat import sql
from speccat.catalogue.datafile import read_yaml
from speccat.catalogue.store import present

FULL = -1  # the mask of full recompute in the views


@cache
def layouts() -> dict:
    """report/layouts.yaml: the layout of each GPU count the index's whole-rank memory is read at."""
    return read_yaml(resources.files(__package__).joinpath("layouts.yaml"))


@cache
def pages() -> dict:
    """report/pages.yaml: how many models the report draws, and what its reads may hold."""
    return read_yaml(resources.files(__package__).joinpath("pages.yaml"))


@dataclass
class Catalogue:
    """Everything the pages show, by repo where it is per repo. Each list holds a query's rows as dicts."""

    run: dict[str, Any] | None
    defaults: dict[str, dict[str, Any]]  # stack -> its default setting (chosen_settings)
    models: list[dict[str, Any]]  # the models drawn: the most downloaded, at most pages.yaml's model_pages
    with_spec: int  # repos with a spec at the latest versions, drawn or not
    refusals: list[dict[str, Any]]
    frontier: dict[str, dict[str, list[dict]]]  # stack -> repo -> rows at the stack's default setting
    classes: dict[str, list[dict]]  # repo -> every class of switch sets at the transformers default setting
    parts: dict[str, list[dict]]  # repo -> rows at the transformers default setting
    ops: dict[str, list[dict]]  # repo -> rows at the transformers default setting, op by op
    memory: dict[str, list[dict]]  # repo -> rows at every setting of the memory curve
    fits: dict[str, list[dict]]  # repo -> repo_fits_on rows on the default stack
    whole: dict[str, list[dict]]  # repo -> rank_fits rows at the index's layouts, no recompute, the default length
    memory_sizes: list[dict[str, Any]]  # fits_on_sizes
    measured: dict[str, list[dict]]
    changes: list[dict[str, Any]]
    tolerance: float = 0.0
    seq_lengths: list[int] = field(default_factory=list)  # the lengths the table fits_on answers at


def rows(con, name: str, params: dict | None = None) -> list[dict[str, Any]]:
    """The rows of sql/report/<name>.sql as dicts, with `params` set as variables."""
    result = present.run(con, sql.load(f"report/{name}"), params)
    return [dict(zip(result.columns, row)) for row in result.rows]


def by_repo(items: Iterable[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for row in items:
        out[row["repo_id"]].append(row)
    return dict(out)


def load(con) -> Catalogue:
    """Read the whole report from a read-only connection to the catalogue: of the repos with a
    spec, the most downloaded pages.yaml's model_pages, registered with DuckDB as the relation
    `report_repos` (an Arrow table) that the per-repo queries join."""
    models = rows(con, "models")
    drawn = models[: int(pages()["model_pages"])]
    con.register("report_repos", pa.table({"repo_id": pa.array([m["repo_id"] for m in drawn], pa.string())}))
    try:
        return _load(con, drawn, len(models))
    finally:
        con.unregister("report_repos")


def _load(con, models: list[dict[str, Any]], with_spec: int) -> Catalogue:
    from speccat.catalogue.records.oprecords import load_records

    run = rows(con, "run")
    run = run[0] if run else None
    defaults = {}
    for stack in ("transformers", "megatron"):
        found = rows(con, "setting", {"stack": stack})
        if len(found) == 1:
            defaults[stack] = found[0]
    grid = rows(con, "grid")
    frontier = {
        stack: by_repo(rows(con, "frontier", {"setting_id": setting["setting_id"]})) for stack, setting in defaults.items()
    }
    # The sets drawn: every class representative on some kind's frontier at a stack's default
    # setting, no recompute (mask 0, off the frontier where a set saves bytes at no cost) and
    # full recompute (-1).
    drawn = {(r["repo_id"], r["mask"]) for per_repo in frontier.values() for rs in per_repo.values() for r in rs}
    drawn |= {(repo, mask) for repo, _ in list(drawn) for mask in (0, FULL)}
    drawn = sorted(drawn)
    masks = sorted({m for _, m in drawn})
    con.register("report_sets", pa.table({"repo_id": [r for r, _ in drawn], "mask": pa.array([m for _, m in drawn], pa.int16())}))
    try:
        parts = by_repo(rows(con, "parts", {"setting_id": defaults["transformers"]["setting_id"]})) if "transformers" in defaults else {}
        ops = by_repo(rows(con, "ops", {"setting_id": defaults["transformers"]["setting_id"], "masks": masks})) if "transformers" in defaults else {}
        memory_rows = rows(con, "memory", {"masks": masks})
    finally:
        con.unregister("report_sets")
    whole_rows = []
    if "transformers" in defaults:
        default = defaults["transformers"]
        at = {(s["seq_length"], s["tp"]): s["setting_id"] for s in grid if s["stack"] == "transformers"}  # the grid query: cp 1
        for lay in layouts()["index"].values():
            setting_id = at.get((default["seq_length"], lay["tp"]))
            if setting_id is not None:
                whole_rows += rows(con, "whole", {"setting_id": setting_id, "mask": 0, "dp": lay["dp"], "pp": lay["pp"], "zero": lay["zero"]})
    fits = rows(con, "fits")
    return Catalogue(
        run=run,
        defaults=defaults,
        models=models,
        with_spec=with_spec,
        refusals=rows(con, "refusals"),
        frontier=frontier,
        classes=by_repo(rows(con, "classes", {"setting_id": defaults["transformers"]["setting_id"]})) if "transformers" in defaults else {},
        parts=parts,
        ops=ops,
        memory=by_repo(memory_rows),
        fits=by_repo(fits),
        whole=by_repo(whole_rows),
        memory_sizes=rows(con, "sizes"),
        measured=by_repo(rows(con, "measured")),
        changes=rows(con, "changes"),
        tolerance=load_records().tolerance,
        seq_lengths=sorted({r["seq_length"] for r in fits}),
    )
