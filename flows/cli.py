"""The `speccat` console script: one argparse parser, one module per command group.

Each module in COMMAND_MODULES has `register(subparsers)`, which adds its commands and sets
`handler=callable(args) -> int` as the parser default. Heavy imports (torch, transformers,
prefect, duckdb) stay inside the handlers so `speccat --help` is fast.

Errors print one line, never a traceback, and exit with the status of EXIT_CODES (README.md,
"Exit status"); `main` is the one place that turns an exception into that line. With
`--json` (or `--format json`) the line is instead {"error": {"reason": CODE, "message": TEXT}}
on stdout, with a reason from catalogue/vocabulary.yaml, for every failure: a bad flag, a
missing file, a refusal, an interrupt, a bug.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from importlib.metadata import version as dist_version

from speccat.catalogue.errors import InputError, ReasonError, one_line

COMMAND_MODULES: tuple[str, ...] = ("cli_catalogue", "cli_refresh", "cli_census", "cli_price", "cli_fit", "cli_report")

# The exit status of each outcome: a stable contract, documented in README.md.
EXIT_CODES = {"ok": 0, "internal": 1, "refused": 2, "unavailable": 3, "interrupted": 130}
# Refusals that say the catalogue or the source is unavailable rather than the input wrong:
# (group, reason), or (group, None) for every reason of the group.
UNAVAILABLE: frozenset[tuple[str, str | None]] = frozenset(
    {("store", "locked"), ("store", "no_catalogue"), ("store", "write_failed"), ("store", "lake"), ("fetch", None)}
)
# Exceptions of the standard library that mean the user named a path that cannot be used.
PATH_ERRORS: dict[type, str] = {
    FileNotFoundError: "not_found",
    IsADirectoryError: "bad_argument",
    NotADirectoryError: "bad_argument",
    FileExistsError: "bad_argument",
    PermissionError: "bad_argument",
}


class Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is an InputError (one line, exit 2, JSON with --json) instead
    of a usage block and SystemExit. Subparsers are made of the same class."""

    def error(self, message: str):
        raise InputError("bad_argument", f"{self.prog}: {message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="speccat",
        description="Activation-memory catalogue of Hugging Face architectures.",
        epilog="examples:\n  speccat refresh --source snapshot\n  speccat query latest_specs\n"
        "  speccat show Qwen/Qwen3-8B --tp 2\n  speccat price flows/snapshot/Qwen__Qwen3-8B --tp 2\n"
        "exit status: 0 ok, 1 internal error, 2 refused input, 3 catalogue or source unavailable, 130 interrupted",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"speccat {dist_version('speccat')}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"speccat.flows.{name}").register(sub)
    return parser


def classify(err: BaseException) -> tuple[str, str, str]:
    """(outcome of EXIT_CODES, reason, one-line message) of an exception that ended a command."""
    if isinstance(err, ReasonError):
        unavailable = (err.group, err.reason) in UNAVAILABLE or (err.group, None) in UNAVAILABLE
        return ("unavailable" if unavailable else "refused"), err.reason, str(err)
    if isinstance(err, KeyboardInterrupt):
        return "interrupted", "interrupted", "interrupted"
    for kind, reason in PATH_ERRORS.items():
        if isinstance(err, kind):
            where = f"{err.filename}: " if getattr(err, "filename", None) else ""
            return "refused", reason, one_line(f"{where}{err.strerror or err}")
    return "internal", "internal_error", one_line(f"{type(err).__name__}: {err}")


def _wants_json(argv: list[str], args: argparse.Namespace | None) -> bool:
    if args is not None:
        return bool(getattr(args, "json", False)) or getattr(args, "format", None) == "json"
    return "--json" in argv or "--format=json" in argv or " ".join(argv).find("--format json") >= 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = None
    try:
        args = build_parser().parse_args(argv)
        return int(args.handler(args) or 0)
    except BrokenPipeError:
        # The reader went away (`speccat show ... | head`): stop quietly. Point stdout at
        # /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CODES["ok"]
    except (Exception, KeyboardInterrupt) as err:  # one clear line, never a traceback
        outcome, reason, message = classify(err)
        try:
            if _wants_json(argv, args):
                print(json.dumps({"error": {"reason": reason, "message": message}}))
            else:
                print(f"speccat: {reason}: {message}", file=sys.stderr)
        except BrokenPipeError:
            pass
        return EXIT_CODES[outcome]


if __name__ == "__main__":
    sys.exit(main())
