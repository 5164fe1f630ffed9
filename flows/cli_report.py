"""`speccat report OUT/`: the catalogue as a static site (docs/report.md).

It reads the catalogue read-only, as `speccat query` does, and writes index.html, a page per
model, compare.html, changes.html and truth.html with plotly.min.js beside them, so the site
opens from disk with no network. OUT is built beside itself and swapped in whole; a folder
that is not a report is refused."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from speccat.flows.cli_options import catalogue_options, catalogue_target, epilog


def register(subparsers: argparse._SubParsersAction) -> None:
    report = subparsers.add_parser(
        "report",
        help="write the catalogue as a static site of tables and plots (opens from disk, no network)",
        description="Write OUT/index.html (every model, sortable), a page per model, compare.html, changes.html and "
        "truth.html from the catalogue's views. OUT is replaced whole; a folder that is not a report is refused.",
        **epilog("speccat report report/", "speccat report /srv/speccat/ --db /data/catalogue.duckdb",
                  "speccat report site/ --json | jq .largest_model_page_bytes"),
    )  # fmt: skip
    report.add_argument("out_dir", metavar="OUT")
    catalogue_options(report)
    report.add_argument("--json", action="store_true", help="print the report's manifest as JSON")
    report.set_defaults(handler=report_command)


def report_command(args: argparse.Namespace) -> int:
    from speccat.report.site import build

    with catalogue_target(args).open_readonly() as con:
        manifest = build(con, args.out_dir)
    if args.json:
        print(json.dumps(manifest, default=str, sort_keys=True))
        return 0
    print(f"wrote {len(manifest['pages'])} pages ({manifest['models']} models) in {manifest['read_s'] + manifest['write_s']:.1f} s: "
          f"{Path(args.out_dir) / 'index.html'}")  # fmt: skip
    return 0
