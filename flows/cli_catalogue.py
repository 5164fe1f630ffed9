"""`speccat query`, `speccat show` and `speccat export`: reading the published catalogue (docs/catalogue.md).

Their SQL is sql/queries/ (named queries), sql/show/ (what `show` prints) and sql/steps/export_*
(the export). A setting left unchosen is the grid's default, which the catalogue holds in its
table `setting_defaults` (from catalogue/records/settings.yaml): the same default the queries use.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from speccat.flows.targets import DEFAULT_DB


def register(subparsers: argparse._SubParsersAction) -> None:
    query = subparsers.add_parser(
        "query",
        help="run SQL, a .sql file or a named query (sql/queries) against the catalogue",
        description="Run SQL against the catalogue. SQL_OR_FILE is SQL text, a .sql file, or the "
        "name of a query shipped in sql/queries (latest_specs, fits_budget, masks_ranked, ...). "
        "Queries read parameters with getvariable('NAME'); pass them with --param NAME=VALUE.",
    )
    query.add_argument("sql_or_file", metavar="SQL_OR_FILE")
    query.add_argument("--db", default=DEFAULT_DB, help=f"catalogue file (default {DEFAULT_DB})")
    query.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE")
    query.add_argument("--format", choices=("table", "csv", "json"), default="table")
    query.set_defaults(handler=query_command)

    show = subparsers.add_parser("show", help="a readable summary of one model in the catalogue")
    show.add_argument("repo_id", metavar="REPO_ID")
    show.add_argument("--db", default=DEFAULT_DB, help=f"catalogue file (default {DEFAULT_DB})")
    grid_default = "default: the grid's, from the catalogue's setting_defaults"
    show.add_argument("--seq", type=int, help=f"sequence length ({grid_default})")
    show.add_argument("--micro-batch", type=int, help=f"sequences per micro-batch ({grid_default})")
    show.add_argument("--tp", type=int, help=f"tensor-parallel ranks ({grid_default})")
    show.add_argument("--cp", type=int, help=f"context-parallel ranks ({grid_default})")
    show.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    show.set_defaults(handler=show_command)

    export = subparsers.add_parser("export", help="write the planners' tables as Parquet, partitioned by setting")
    export.add_argument("out_dir", metavar="DIR")
    export.add_argument("--db", default=DEFAULT_DB, help=f"catalogue file (default {DEFAULT_DB})")
    export.set_defaults(handler=export_command)


def query_command(args: argparse.Namespace) -> int:
    from speccat.catalogue.store import present
    from speccat.catalogue.store.file import open_readonly

    text = present.resolve_query(args.sql_or_file)
    params = present.parse_params(args.param)
    with contextlib.closing(open_readonly(args.db)) as con:
        result = present.run(con, text, params)
    sys.stdout.write(present.render(result, args.format))
    return 0


def show_command(args: argparse.Namespace) -> int:
    from speccat import sql
    from speccat.catalogue.store import present
    from speccat.catalogue.store.file import open_readonly

    # None leaves a field to the grid's default (sql/views/chosen_settings.sql).
    wanted = {"seq_length": args.seq, "micro_batch": args.micro_batch, "tp": args.tp, "cp": args.cp}
    with contextlib.closing(open_readonly(args.db)) as con:
        repo = present.run(con, sql.load("show/repo"), {"repo_id": args.repo_id})
        if not repo.rows:
            (known,) = present.run(con, sql.load("show/repo_count")).rows[0]
            raise LookupError(f"{args.repo_id} has no spec at the latest census version in {args.db} ({known} repos stored)")
        settings = present.run(con, sql.load("show/settings"), wanted)
        if len(settings.rows) != 1:
            grid = _records(present.run(con, sql.load("show/grid"), wanted))[0]
            chosen = {k: grid[k] for k in wanted}
            raise LookupError(
                f"{len(settings.rows)} settings of the grid match {chosen}; the grid has seq {grid['grid_seq_length']}, "
                f"tp {grid['grid_tp']}, cp {grid['grid_cp']}, micro-batch {grid['grid_micro_batch']}"
            )
        setting = dict(zip(settings.columns, settings.rows[0]))
        kinds = present.run(con, sql.load("show/kinds"), {"repo_id": args.repo_id})
        prices = present.run(con, sql.load("show/prices"), {"repo_id": args.repo_id, "setting_id": setting["setting_id"]})
        measured = present.run(con, present.resolve_query("priced_vs_measured"), {"repo_id": args.repo_id})
    if args.json:
        print(json.dumps(
            {
                "repo": _records(repo)[0],
                "setting": setting,
                "kinds": _records(kinds),
                "prices": _records(prices),
                "priced_vs_measured": _records(measured),
            },
            default=str,
        ))
        return 0
    spec = dict(zip(repo.columns, repo.rows[0]))
    print(f"{args.repo_id}")
    print(present.table(("field", "value"), [[k, present.cell(k, v)] for k, v in spec.items() if v is not None]))
    print("kinds")
    print(present.render(kinds))
    print("setting " + ", ".join(f"{k} {v}" for k, v in setting.items()))
    print(present.render(prices))
    print("priced against measured (bytes per token, one layer, no recompute)")
    print(present.render(measured))
    return 0


def export_command(args: argparse.Namespace) -> int:
    from speccat.catalogue.store.export import export

    manifest = export(args.db, args.out_dir)
    for name, rows in manifest["tables"].items():
        print(f"{name:20} {rows:>12,} rows")
    print(f"wrote {args.out_dir}")
    return 0


def _records(result) -> list[dict]:
    return [dict(zip(result.columns, row)) for row in result.rows]
