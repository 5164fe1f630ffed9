"""`speccat query`, `speccat show` and `speccat export`: reading the published catalogue (DESIGN §6)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

DEFAULT_DB = "catalogue.duckdb"  # the default of `speccat refresh --db` too (DESIGN §4)


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
    query.set_defaults(run=run_query)

    show = subparsers.add_parser("show", help="a readable summary of one model in the catalogue")
    show.add_argument("repo_id", metavar="REPO_ID")
    show.add_argument("--db", default=DEFAULT_DB, help=f"catalogue file (default {DEFAULT_DB})")
    show.add_argument("--seq", type=int, default=4096, help="sequence length (default 4096)")
    show.add_argument("--micro-batch", type=int, default=1)
    show.add_argument("--tp", type=int, default=1)
    show.add_argument("--cp", type=int, default=1)
    show.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    show.set_defaults(run=run_show)

    export = subparsers.add_parser("export", help="write the planners' tables as Parquet, partitioned by setting")
    export.add_argument("out_dir", metavar="DIR")
    export.add_argument("--db", default=DEFAULT_DB, help=f"catalogue file (default {DEFAULT_DB})")
    export.set_defaults(run=run_export)


def run_query(args: argparse.Namespace) -> int:
    from speccat.catalogue.store import present
    from speccat.catalogue.store.file import open_readonly

    text = present.resolve_query(args.sql_or_file)
    params = present.parse_params(args.param)
    with contextlib.closing(open_readonly(args.db)) as con:
        result = present.run(con, text, params)
    sys.stdout.write(present.render(result, args.format))
    return 0


def run_show(args: argparse.Namespace) -> int:
    from speccat import sql
    from speccat.catalogue.store import present
    from speccat.catalogue.store.file import open_readonly

    wanted = {"seq_length": args.seq, "micro_batch": args.micro_batch, "tp": args.tp, "cp": args.cp}
    with contextlib.closing(open_readonly(args.db)) as con:
        repo = present.run(con, sql.load("show_repo"), {"repo_id": args.repo_id})
        if not repo.rows:
            known = con.execute("SELECT count(*) FROM repos").fetchone()[0]
            raise LookupError(f"{args.repo_id} has no spec at the latest census version in {args.db} ({known} repos stored)")
        settings = present.run(con, sql.load("show_settings"), wanted)
        if len(settings.rows) != 1:
            grid = con.execute(
                "SELECT list(DISTINCT seq_length ORDER BY seq_length), list(DISTINCT tp ORDER BY tp), "
                "list(DISTINCT cp ORDER BY cp), list(DISTINCT micro_batch ORDER BY micro_batch) FROM settings"
            ).fetchone()
            raise LookupError(
                f"{len(settings.rows)} settings of the grid match {wanted}; the grid has seq {grid[0]}, "
                f"tp {grid[1]}, cp {grid[2]}, micro-batch {grid[3]}"
            )
        setting = dict(zip(settings.columns, settings.rows[0]))
        kinds = present.run(con, sql.load("show_kinds"), {"repo_id": args.repo_id})
        prices = present.run(con, sql.load("show_prices"), {"repo_id": args.repo_id, "setting_id": setting["setting_id"]})
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


def run_export(args: argparse.Namespace) -> int:
    from speccat.catalogue.store.export import export

    manifest = export(args.db, args.out_dir)
    for name, rows in manifest["tables"].items():
        print(f"{name:20} {rows:>12,} rows")
    print(f"wrote {args.out_dir}")
    return 0


def _records(result) -> list[dict]:
    return [dict(zip(result.columns, row)) for row in result.rows]
