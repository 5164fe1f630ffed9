"""Command-line pieces several `speccat` commands share: the options naming the catalogue read
(--db, --lake, --lake-data) and the target they name, `--units` for byte figures, and the
examples epilog of a command's help."""

from __future__ import annotations

import argparse

from speccat.catalogue.store.units import PRINTED
from speccat.flows.targets import DB_ENV, DEFAULT_DB, default_db, make_target


def catalogue_options(parser: argparse.ArgumentParser) -> None:
    """--db, --lake and --lake-data: the catalogue a command reads (`catalogue_target`)."""
    parser.add_argument("--db", default=None, help=f"catalogue file (default ${DB_ENV}, else {DEFAULT_DB})")
    parser.add_argument("--lake", default=None, metavar="CATALOG", help="read this DuckLake catalog instead (sqlite:FILE, postgres:..., a DuckDB file)")
    parser.add_argument("--lake-data", default=None, metavar="PATH", help="the DuckLake's data path (with --lake)")


def catalogue_target(args: argparse.Namespace):
    """The catalogue `catalogue_options` name: the file (--db, else $SPECCAT_DB, else the
    default) or the DuckLake (--lake)."""
    return make_target(args.db or default_db(), args.lake, args.lake_data)


def units_option(parser: argparse.ArgumentParser) -> None:
    """--units: how byte figures print (catalogue/store/units.py)."""
    parser.add_argument(
        "--units", choices=tuple(PRINTED), default="human",
        help="how byte figures print: human (B, KiB, MiB, GiB as fits; the default) or always one unit",
    )  # fmt: skip


def epilog(*lines: str) -> dict:
    """A parser's keywords for an `examples:` epilog of `lines`, printed as written."""
    return {"epilog": "examples:\n" + "\n".join(f"  {line}" for line in lines), "formatter_class": argparse.RawDescriptionHelpFormatter}
