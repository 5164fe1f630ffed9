"""`speccat census CONFIG [--json]`: census one config and print its ModelSpec.

CONFIG is a config.json, a folder holding one, or a repo id the catalogue holds
(`read_config`, shared with `speccat price`). With --json the ModelSpec mapping is printed as
JSON (a stable contract); without it, a readable summary. A refusal exits 2 (cli.py prints it:
one line, or {"error": ...} with --json).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from speccat.catalogue.errors import InputError
from speccat.catalogue.vocabulary import OPS, UNPRICED_OPS
from speccat.flows.targets import DB_ENV, DEFAULT_DB, default_db

CONFIG_HELP = "a config.json, a folder holding one, or a repo id the catalogue holds (matched ignoring case)"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "census",
        help="census one config.json into a ModelSpec",
        description="Build the model on meta/fake tensors, run one layer per distinct shape, print the ModelSpec.",
        epilog="examples:\n  speccat census flows/snapshot/Qwen__Qwen3-8B/config.json\n"
        "  speccat census flows/snapshot/Qwen__Qwen3-8B --json\n  speccat census qwen/qwen3-8b --db catalogue.duckdb",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", metavar="CONFIG", help=CONFIG_HELP)
    parser.add_argument("--db", default=None, help=f"the catalogue a repo id is looked up in (default ${DB_ENV}, else {DEFAULT_DB})")
    parser.add_argument("--json", action="store_true", help="print the ModelSpec as JSON")
    parser.add_argument("--seq", type=int, default=None, help="sequence length of the measured bytes (default: the settings grid's)")
    parser.add_argument("--name", help="the spec's name (default: ORG/NAME from an ORG__NAME/config.json path, else the file name)")
    parser.set_defaults(handler=census_command)


def default_name(path: Path) -> str:
    if path.name == "config.json" and path.parent.name:
        return path.parent.name.replace("__", "/", 1)
    return path.stem


def read_config(text: str, db: str | None = None) -> tuple[dict, str]:
    """CONFIG as `census` and `price` take it, and the name it gives the spec: a config.json
    file; a folder holding config.json (`ORG__NAME/` names it ORG/NAME); or a repo id the
    catalogue at `db` holds (its stored config; the id matched ignoring case when that names
    one repo). Anything else is InputError("not_found")."""
    from speccat.census import load_config_file

    path = Path(text)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InputError("not_found", f"{path} is a folder without a config.json")
        path = path / "config.json"
    if path.is_file():
        return load_config_file(path), default_name(path)
    if path.suffix == ".json" or text.count("/") != 1:
        raise InputError("not_found", f"{text}: no such file or folder (CONFIG is {CONFIG_HELP})")
    return _stored_config(text, db or default_db())


def _stored_config(repo_id: str, db: str) -> tuple[dict, str]:
    from speccat import sql
    from speccat.catalogue.store import present
    from speccat.catalogue.store.night import StoreError
    from speccat.flows.targets import FileTarget

    try:
        with FileTarget(db).open_readonly() as con:
            resolved = present.resolve_repo_id(con, repo_id)
            rows = present.run(con, sql.load("show/repo_config"), {"repo_id": resolved}).rows
    except StoreError as err:
        if err.reason != "no_catalogue":
            raise
        raise InputError("not_found", f"{repo_id}: no such file or folder, and no catalogue at {db} to look the repo up in") from None
    if not rows:
        raise InputError("not_found", f"{resolved} is in {db} but has no stored config (its fetch failed)")
    return json.loads(rows[0][0]), resolved


def census_command(args: argparse.Namespace) -> int:
    from speccat.census.intake.config import precheck

    config, name = read_config(args.config, args.db)
    precheck(config)  # absurd configs are refused before torch is even imported
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # read when transformers is first imported
    from speccat.census import run_census

    spec = run_census(config, name=args.name or name, seq_length=args.seq)
    print(spec.to_json() if args.json else summary(spec))
    return 0


def _fmt(value) -> str:
    return f"{value:,.0f}" if isinstance(value, float) else str(value)


def summary(spec) -> str:
    """A readable account of a ModelSpec: dims, flags, stack, and per kind the ops, params, measured bytes and forward FLOPs."""
    data = spec.to_dict()
    structure = {"name", "arch", "layers", "ops", "flavours", "params", "measured"}
    lines = [f"{data['name']}  ({data['arch']})"]
    dims = [f"{k}={v}" for k, v in data.items() if k not in structure and not isinstance(v, bool)]
    flags = [k for k, v in data.items() if v is True]
    lines.append("  " + "  ".join(dims))
    lines.append("  flags: " + (", ".join(flags) or "none"))
    lines.append("  stack: " + " ".join(f"{g['kind']}×{g['count']}" for g in data["layers"]))
    params = data["params"]
    lines.append(
        f"  params: embedding {params['embedding']:,}  output {params['output']:,}  final_norm {params['final_norm']:,}"
        f"  embedding_extra {params.get('embedding_extra', 0):,}  head_extra {params.get('head_extra', 0):,}"
    )
    for kind in spec.kinds:
        flavour = data["flavours"][kind]
        lines.append(f"  kind {kind} ({flavour['attention']} attention, {flavour['ffn']} ffn)")
        lines.append("    ops:    " + " ".join(f"{op}={data['ops'][kind][op]}" for op in OPS))
        lines.append("    params: " + " ".join(f"{part}={n:,}" for part, n in params["kinds"][kind].items() if n))
        measured = data["measured"][kind]
        impls = ", ".join(measured.get(k) for k in ("attention_impl", "experts_impl") if measured.get(k))
        per_op = measured["bytes_per_token"]
        total = sum(per_op.values())
        lines.append(f"    saved bytes/token at s={measured['seq_length']} ({impls}): {_fmt(total)}")
        lines.append("      " + " ".join(f"{op}={_fmt(per_op[op])}" for op in OPS + UNPRICED_OPS if per_op[op]))
        if "forward_flops" in measured:
            lines.append(f"    forward FLOPs of one layer at s={measured['seq_length']}: {measured['forward_flops']:,}")
        if "backward_peak" in measured:
            lines.append(f"    backward peak of one layer (beyond what was alive before it began) at s={measured['seq_length']}: {_fmt(measured['backward_peak'] / measured['seq_length'])} bytes/token")
        if "working_set" in measured:  # what is alive at that peak: count × width (elements a token) and dtype
            widths = measured["working_set"]["widths"]
            lines.append("      working set: " + " ".join(f"{n:+d}×{w:,} {dtype}" for w, dtype, n in widths)
                         + (f" {measured['working_set']['constant_bytes']:+,} B" if measured["working_set"]["constant_bytes"] else ""))
    return "\n".join(lines)
