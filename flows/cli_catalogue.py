"""`speccat query`, `speccat show` and `speccat export`: reading the published catalogue (docs/catalogue.md).

Their SQL is sql/queries/ (named queries), sql/show/ (what `show` prints) and sql/steps/export_*
(the export). A setting left unchosen is the grid's default, which the catalogue holds in its
table `setting_defaults` (from catalogue/records/settings.yaml): the same default the queries use.

Every read opens the catalogue read-only (the file, or a DuckLake with --lake), so a reader
never blocks the nightly writer or another reader, and never waits: a file another process
holds read-write is one `locked` line, exit 3.
"""

from __future__ import annotations

import argparse
import json
import sys

from speccat.flows.cli_options import catalogue_options, catalogue_target, epilog, units_option


def register(subparsers: argparse._SubParsersAction) -> None:
    query = subparsers.add_parser(
        "query",
        help="run SQL, a .sql file or a named query (sql/queries) against the catalogue",
        description="Run SQL against the catalogue, read-only. SQL_OR_FILE is SQL text, a .sql file, or the "
        "name of a query shipped in sql/queries (latest_specs, fits_budget, masks_ranked, ...). "
        "Queries read parameters with getvariable('NAME'); pass them with --param NAME=VALUE "
        "(a NAME the query does not read is refused).",
        **epilog(
            "speccat query latest_specs",
            "speccat query masks_ranked -p repo_id=Qwen/Qwen3-8B -p tp=2 --units MiB",
            "speccat query fits_budget -p budget_gib=40 -p seq_length=8192 --format csv",
            'speccat query "SELECT reason, count(*) FROM failures GROUP BY ALL" --format json',
            "SPECCAT_DB=/data/catalogue.duckdb speccat query changes",
        ),
    )
    query.add_argument("sql_or_file", metavar="SQL_OR_FILE")
    catalogue_options(query)
    query.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE")
    query.add_argument("--format", choices=("table", "csv", "json"), default="table")
    query.add_argument("--json", action="store_true", help="the same as --format json")
    units_option(query)
    query.set_defaults(handler=query_command)

    show = subparsers.add_parser(
        "show",
        help="a readable summary of one model in the catalogue",
        description="One repo's spec, kinds and bytes at one setting of the grid; a repo that failed shows "
        "its failure. REPO_ID matches case-insensitively when that names one repo.",
        **epilog(
            "speccat show meta-llama/Llama-3.1-8B-Instruct",
            "speccat show qwen/qwen3-8b --seq 8192 --tp 2 --units GiB",
            "speccat show Qwen/Qwen3-8B --json | jq .prices",
        ),
    )
    show.add_argument("repo_id", metavar="REPO_ID")
    catalogue_options(show)
    grid_default = "default: the grid's, from the catalogue's setting_defaults"
    show.add_argument("--seq", type=int, help=f"sequence length ({grid_default})")
    show.add_argument("--micro-batch", type=int, help=f"sequences per micro-batch ({grid_default})")
    show.add_argument("--tp", type=int, help=f"tensor-parallel ranks ({grid_default})")
    show.add_argument("--cp", type=int, help=f"context-parallel ranks ({grid_default})")
    show.add_argument("--stack", help=f"the training stack priced: transformers or megatron ({grid_default})")
    units_option(show)
    show.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    show.set_defaults(handler=show_command)

    export = subparsers.add_parser(
        "export",
        help="write the planners' tables as Parquet, partitioned by setting",
        **epilog("speccat export planners/", "speccat export planners/ --lake sqlite:lake.sqlite --lake-data lake/"),
    )
    export.add_argument("out_dir", metavar="DIR")
    catalogue_options(export)
    export.add_argument("--json", action="store_true", help="print the manifest as JSON")
    export.set_defaults(handler=export_command)


def _run(con, text: str, params: dict | None = None):
    """present.run, with DuckDB's refusal of the SQL as one InputError line."""
    import duckdb

    from speccat.catalogue.errors import InputError
    from speccat.catalogue.store import present
    from speccat.catalogue.store.file import first_line

    try:
        return present.run(con, text, params)
    except duckdb.Error as err:
        raise InputError("bad_query", first_line(err)) from None


def query_command(args: argparse.Namespace) -> int:
    from speccat.catalogue.store import present

    text = present.resolve_query(args.sql_or_file)
    params = present.parse_params(args.param)
    present.check_params(text, params)
    with catalogue_target(args).open_readonly() as con:
        if isinstance(params.get("repo_id"), str):
            params["repo_id"] = present.resolve_repo_id(con, params["repo_id"])
        result = _run(con, text, params)
    sys.stdout.write(present.render(result, "json" if args.json else args.format, args.units))
    return 0


def show_command(args: argparse.Namespace) -> int:
    from speccat import sql
    from speccat.catalogue.errors import InputError
    from speccat.catalogue.store import present

    # None leaves a field to the grid's default (sql/views/chosen_settings.sql).
    wanted = {"stack": args.stack, "seq_length": args.seq, "micro_batch": args.micro_batch, "tp": args.tp, "cp": args.cp}
    with catalogue_target(args).open_readonly() as con:
        repo_id = present.resolve_repo_id(con, args.repo_id)
        repo = _run(con, sql.load("show/repo"), {"repo_id": repo_id})
        if not repo.rows:
            failure = _records(_run(con, sql.load("show/failure"), {"repo_id": repo_id}))
            return _show_failure(args, repo_id, failure[0] if failure else None)
        settings = _run(con, sql.load("show/settings"), wanted)
        if len(settings.rows) != 1:
            grid = _records(_run(con, sql.load("show/grid"), wanted))[0]
            chosen = {k: grid[k] for k in wanted}
            raise InputError(
                "bad_argument",
                f"{len(settings.rows)} settings of the grid match {chosen}; the grid has seq {grid['grid_seq_length']}, "
                f"tp {grid['grid_tp']}, cp {grid['grid_cp']}, micro-batch {grid['grid_micro_batch']}, stack {grid['grid_stack']}",
            )
        setting = dict(zip(settings.columns, settings.rows[0]))
        kinds = _run(con, sql.load("show/kinds"), {"repo_id": repo_id})
        prices = _run(con, sql.load("show/prices"), {"repo_id": repo_id, "setting_id": setting["setting_id"]})
        measured = _run(con, present.resolve_query("priced_vs_measured"), {"repo_id": repo_id})
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
    print(f"{repo_id}")
    print(present.table(("field", "value"), [[k, present.cell(k, v, args.units)] for k, v in spec.items() if v is not None]))
    print("kinds")
    print(present.render(kinds, units=args.units))
    print("setting " + ", ".join(f"{k} {v}" for k, v in setting.items()))
    print(present.render(prices, units=args.units))
    print("priced against measured (bytes per token, one layer, no recompute; forward FLOPs, one layer, one sequence)")
    print(present.render(measured, units=args.units))
    return 0


def _show_failure(args: argparse.Namespace, repo_id: str, failure: dict | None) -> int:
    """A stored repo without a spec at the latest census version: why, from its latest failure."""
    if args.json:
        print(json.dumps({"repo": {"repo_id": repo_id}, "failure": failure}, default=str))
        return 0
    if failure is None:
        print(f"{repo_id}: no spec at the latest census version and no failure recorded (it may not be censused yet)")
    else:
        print(
            f"{repo_id} failed at {failure['stage']}: {failure['reason']}: {failure['message']} "
            f"(night {failure['run_id']}, {failure['started']})"
        )
    return 0


def export_command(args: argparse.Namespace) -> int:
    from speccat.catalogue.store.export import export_from

    target = catalogue_target(args)
    with target.open_readonly() as con:
        manifest = export_from(con, str(target), args.out_dir)
    if args.json:
        print(json.dumps(manifest, default=str, sort_keys=True))
        return 0
    for name, rows in manifest["tables"].items():
        print(f"{name:20} {rows:>12,} rows")
    print(f"wrote {args.out_dir}")
    return 0


def _records(result) -> list[dict]:
    return [dict(zip(result.columns, row)) for row in result.rows]
