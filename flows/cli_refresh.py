"""`speccat refresh` (run the nightly flow now) and `speccat serve` (serve its deployment).

`refresh` runs the Prefect flow in this process, against PREFECT_API_URL if one is set, else
Prefect's ephemeral local API (no server to start). It shows each stage's progress on
stderr, then the night's counts and how to query the catalogue.

`serve` serves the deployment written in prefect.yaml (`nightly-refresh`, cron `0 3 * * *`)
with `flow.serve`. Prefect schedules only against a running server, so `serve` refuses to
start without PREFECT_API_URL; `--check` prints what it would serve and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from speccat.catalogue.errors import InputError
from speccat.flows.targets import DB_ENV, DEFAULT_DB, default_db

# Prefect settings speccat needs unless the operator chose otherwise (read at prefect import).
PREFECT_DEFAULTS = {
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",  # a fresh ephemeral DB takes ~20 s
    # Every INFO line of a run reaches Prefect's API (refusals, the summary), by hand or served;
    # the terminal shows only warnings and errors (the progress lines say the rest).
    "PREFECT_LOGGING_LEVEL": "INFO",
    "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",
    # The server's telemetry cannot reach its endpoint on a machine without internet and logs a
    # false "ERROR ... Failed to send telemetry"; speccat sends nothing.
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}
DEPLOYMENT = "nightly-refresh"
PREFECT_YAML = "prefect.yaml"


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def seconds(text: str) -> float:
    """An argparse type: a number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def register(subparsers) -> None:
    run = subparsers.add_parser(
        "refresh", help="run the nightly refresh flow now",
        epilog="examples:\n  speccat refresh                      # the shipped snapshot into catalogue.duckdb\n"
        "  speccat refresh --source hub --limit 50 --db /data/catalogue.duckdb\n"
        "  speccat refresh --source hub --scope all --hub-tier pro   # every text-generation repo, incrementally\n"
        "  speccat refresh --lake sqlite:lake.sqlite --lake-data lake/ --json\n"
        "exit status: 0 ok (also an empty night), 2 refused input, 3 catalogue locked or source unavailable",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    run.add_argument("--source", choices=("snapshot", "hub"), default="snapshot")
    run.add_argument("--limit", type=positive_int, default=None, help="the top N repos by downloads, N >= 1 (hub)")
    run.add_argument(
        "--scope", choices=("top", "all"), default="top",
        help="hub: the top repos by downloads (default; with --limit), or every text-generation repo, "
        "listing only what changed since the last night and fetching only new or changed shas",
    )  # fmt: skip
    run.add_argument(
        "--hub-tier", default=None, metavar="TIER",
        help="with --scope all: the Hub plan whose rate limits the night stays within (anonymous, free, pro; "
        "default: flows/hub_limits.yaml tier)",
    )  # fmt: skip
    run.add_argument("--db", default=None, help=f"the catalogue file to publish (default ${DB_ENV}, else {DEFAULT_DB})")
    run.add_argument(
        "--lock-wait", type=seconds, default=None, metavar="S",
        help="seconds to wait for another process holding the catalogue file (default: catalogue/store/limits.yaml lock_wait_s)",
    )  # fmt: skip
    run.add_argument("--lake", default=None, metavar="CATALOG", help="publish into this DuckLake catalog instead")
    run.add_argument("--lake-data", default=None, metavar="PATH", help="the DuckLake's data path")
    run.add_argument("--task-runner", choices=("local", "dask"), default="local")
    run.add_argument("--dask-address", default=None, help="a running Dask scheduler, e.g. tcp://host:8786")
    run.add_argument("--workers", type=int, default=None, help="local census processes (default: cores)")
    run.add_argument("--snapshot-dir", default=None, help="a folder laid out like flows/snapshot")
    run.add_argument("--time-limit", type=float, default=600.0, help="seconds one census may take")
    run.add_argument(
        "--memory-limit", type=float, default=None, metavar="MIB",
        help="address space (MiB) one census process may add (default: census/intake/limits.yaml census_memory_mib)",
    )  # fmt: skip
    run.add_argument("--rebuild", action="store_true", help="census everything again, ignoring the cache")
    run.add_argument(
        "--no-report", dest="report", action="store_false",
        help="publish without writing the report beside the catalogue (speccat report writes it later)",
    )  # fmt: skip
    run.add_argument("--json", action="store_true", help="print the night's counts as JSON")
    run.set_defaults(handler=refresh_command)

    serve = subparsers.add_parser(
        "serve", help=f"serve the {DEPLOYMENT} deployment (needs a Prefect server)",
        epilog="examples:\n  prefect server start &\n  PREFECT_API_URL=http://127.0.0.1:4200/api speccat serve\n  speccat serve --check",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    serve.add_argument("--file", default=None, help=f"the {PREFECT_YAML} to read (default: the project's)")
    serve.add_argument("--deployment", default=DEPLOYMENT)
    serve.add_argument("--check", action="store_true", help="print the deployment and exit")
    serve.add_argument("--json", action="store_true", help="with --check, print the deployment as JSON")
    serve.set_defaults(handler=serve_command)


def _prefect_environment() -> None:
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)


def refresh_command(args: argparse.Namespace) -> int:
    if args.task_runner == "dask" and not args.dask_address:
        raise InputError("bad_argument", "--task-runner dask needs --dask-address")
    if (args.lake is None) != (args.lake_data is None):
        raise InputError("bad_argument", "--lake and --lake-data go together")
    if args.memory_limit is not None and not args.memory_limit > 0:
        raise InputError("bad_argument", f"--memory-limit must be a positive number of MiB, got {args.memory_limit:g}")
    if args.scope == "all" and (args.source != "hub" or args.limit is not None):
        raise InputError("bad_argument", "--scope all crawls the whole Hub: it needs --source hub and no --limit")
    if args.hub_tier is not None:
        from speccat.flows.hub_budget import LIMITS

        LIMITS.quotas(args.hub_tier)  # an unknown tier is refused before the night starts
    if args.snapshot_dir is not None and not Path(args.snapshot_dir).is_dir():
        raise InputError("not_found", f"--snapshot-dir {args.snapshot_dir}: no such folder")
    _prefect_environment()
    from speccat.flows import progress
    from speccat.flows.refresh import refresh

    progress.enable(sys.stderr)
    counts = refresh(
        source=args.source,
        limit=args.limit,
        db=args.db or default_db(),
        task_runner=args.task_runner,
        dask_address=args.dask_address,
        workers=args.workers,
        snapshot_dir=args.snapshot_dir,
        time_limit=args.time_limit,
        memory_limit=args.memory_limit,
        rebuild=args.rebuild,
        lake=args.lake,
        lake_data=args.lake_data,
        lock_wait=args.lock_wait,
        report=args.report,
        scope=args.scope,
        hub_tier=args.hub_tier,
    )
    if args.json:
        print(json.dumps(counts, sort_keys=True))
    else:
        print(format_counts(counts, lake=args.lake is not None))
    return 0


def _program(name: str) -> str:
    """`name` as the hints should spell it: beside this command when it was called by path
    (`.venv/bin/speccat` from `make catalogue`, with the duckdb CLI beside it), else bare."""
    called = Path(sys.argv[0])
    beside = called.with_name(name)
    return str(beside) if called.name == "speccat" and str(called.parent) != "." and beside.exists() else name


def format_counts(counts: dict[str, Any], lake: bool = False) -> str:
    def by_reason(outcome: str) -> str:
        return ", ".join(f"{reason} {n}" for reason, n in counts[outcome].items()) or "none"

    db = counts["db"]
    lines = [
        f"refresh {counts['run_id']} {counts['status']}: published {db} in {counts['seconds']} s "
        f"({counts['wall_seconds']} s with Prefect's start)",
        f"  repos {counts['repos']}, configs {counts['configs']} ({counts['stored']} already stored, "
        f"{counts['new_configs']} new: {counts['censused']} censused, {counts['cached']} from the cache)",
        f"  refused: {by_reason('refused')}",
        f"  failed: {by_reason('failed')}",
    ]
    if counts["failing_repos"]:
        lines.append(f"  failing repos: {', '.join(counts['failing_repos'])}")
    crawl = counts.get("crawl")
    if crawl:
        budget = crawl["budget"]
        spent = ", ".join(f"{bucket} {n}" for bucket, n in budget["requests"].items())
        lines.append(
            f"  Hub crawl ({crawl['listing']} listing, {crawl['tier']} tier): {crawl['n_listed']} listed, {crawl['n_fetched']} fetched, "
            f"{crawl['n_unchanged']} unchanged, {crawl['n_pending']} left for the next night, {crawl['n_gone']} gone; "
            f"requests {spent} over {budget['windows']} window(s), {budget['waited_s']} s waited"
            + (f"; stopped: the {crawl['stopped']} budget is spent" if crawl["stopped"] else "")
        )
    if counts["status"] == "empty":
        lines.append("  the source listed no repo: the night is recorded as empty, and the latest night is unchanged")
    if lake:
        lines.append("query it by attaching the lake with DuckDB's ducklake extension (READ_ONLY)")
    else:
        lines += [
            "query it:",
            f"  {_program('speccat')} query latest_specs --db {db}",
            f"  {_program('speccat')} query \"SELECT stage, reason, count(*) FROM failures GROUP BY ALL\" --db {db}",
            f"  {_program('duckdb')} -readonly {db} \"SELECT name, arch, num_hidden_layers FROM specs\"",
        ]
    return "\n".join(lines)


def find_prefect_yaml(explicit: str | None) -> Path:
    """The given file, else ./prefect.yaml, else the one at the project root."""
    candidates = [Path(explicit)] if explicit else [Path.cwd() / PREFECT_YAML, Path(__file__).parent.parent / PREFECT_YAML]
    for path in candidates:
        if path.is_file():
            return path
    raise InputError("not_found", f"no {PREFECT_YAML} at {', '.join(map(str, candidates))}")


def load_deployment(path: Path, name: str) -> dict[str, Any]:
    from speccat.catalogue.datafile import read_yaml

    data = read_yaml(path) or {}
    for deployment in data.get("deployments") or ():
        if deployment.get("name") == name:
            return deployment
    names = [d.get("name") for d in data.get("deployments") or ()]
    raise InputError("not_found", f"{path}: no deployment named {name!r}; it has {names}")


def serve_options(deployment: dict[str, Any]) -> dict[str, Any]:
    """prefect.yaml's deployment as `Flow.serve` keyword arguments."""
    from prefect.schedules import Cron

    schedules = [
        Cron(s["cron"], timezone=s.get("timezone"), active=s.get("active", True))
        for s in deployment.get("schedules") or ()
    ]
    return {
        "name": deployment["name"],
        "schedules": schedules,
        "parameters": deployment.get("parameters") or {},
        "description": deployment.get("description"),
        "tags": deployment.get("tags") or [],
        "global_limit": deployment.get("concurrency_limit"),
    }


def serve_command(args: argparse.Namespace) -> int:
    _prefect_environment()
    path = find_prefect_yaml(args.file)
    options = serve_options(load_deployment(path, args.deployment))
    if args.check and args.json:
        crons = [{"cron": s.cron, "timezone": s.timezone or "UTC"} for s in options["schedules"]]
        print(json.dumps({"deployment": options["name"], "file": str(path), "schedules": crons, "parameters": options["parameters"]}))
        return 0
    if args.check:
        crons = [f"{s.cron} ({s.timezone or 'UTC'})" for s in options["schedules"]]
        print(f"deployment {options['name']} from {path}")
        print(f"  schedules: {', '.join(crons) or 'none'}")
        print(f"  parameters: {json.dumps(options['parameters'], sort_keys=True)}")
        return 0
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        raise InputError(
            "bad_argument",
            "serve needs a running Prefect server to schedule against: start one with "
            "`prefect server start` and set PREFECT_API_URL (e.g. http://127.0.0.1:4200/api)"
        )
    from prefect.types.entrypoint import EntrypointType

    from speccat.flows.refresh import refresh

    refresh.serve(**options, entrypoint_type=EntrypointType.MODULE_PATH)
    return 0
