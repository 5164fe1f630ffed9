"""The `speccat` console script: one argparse parser, one module per command group.

Each module in COMMAND_MODULES has `register(subparsers)`, which adds its commands and sets
`handler=callable(args) -> int` as the parser default. Heavy imports (torch, transformers,
prefect, duckdb) stay inside the handlers so `speccat --help` is fast.

Errors print one line, never a traceback, and exit non-zero; `main` is the one place that
turns an error into that line. A refusal (any ReasonError: a census, settings, records,
pricing or store refusal) exits 2; with `--json` it is printed on stdout as
{"error": {"reason": CODE, "message": TEXT}}.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from speccat.catalogue.errors import ReasonError

COMMAND_MODULES: tuple[str, ...] = ("cli_catalogue", "cli_refresh", "cli_census", "cli_price")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="speccat",
        description="Activation-memory catalogue of Hugging Face architectures.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"speccat.flows.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except ReasonError as err:
        if getattr(args, "json", False):
            print(json.dumps({"error": err.as_dict()}))
        else:
            print(f"speccat: {err.reason}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("speccat: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # one clear line for the operator, not a traceback
        print(f"speccat: error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
