"""`speccat census CONFIG.json [--json]`: census one config and print its ModelSpec.

With --json the ModelSpec mapping is printed as JSON (a stable contract); without it, a
readable summary. A refusal exits 2 (cli.py prints it: one line, or {"error": ...} with --json).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from speccat.catalogue.vocabulary import OPS, OTHER


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "census",
        help="census one config.json into a ModelSpec",
        description="Build the model on meta/fake tensors, run one layer per distinct shape, print the ModelSpec.",
    )
    parser.add_argument("config", help="path to a Hugging Face config.json")
    parser.add_argument("--json", action="store_true", help="print the ModelSpec as JSON")
    parser.add_argument("--seq", type=int, default=None, help="sequence length of the measured bytes (default: the settings grid's)")
    parser.add_argument("--name", help="the spec's name (default: ORG/NAME from an ORG__NAME/config.json path, else the file name)")
    parser.set_defaults(handler=census_command)


def default_name(path: Path) -> str:
    if path.name == "config.json" and path.parent.name:
        return path.parent.name.replace("__", "/", 1)
    return path.stem


def census_command(args: argparse.Namespace) -> int:
    from speccat.census import load_config_file
    from speccat.census.config import precheck

    path = Path(args.config)
    config = load_config_file(path)
    precheck(config)  # absurd configs are refused before torch is even imported
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # read when transformers is first imported
    from speccat.census import run_census

    spec = run_census(config, name=args.name or default_name(path), seq_length=args.seq)
    print(spec.to_json() if args.json else summary(spec))
    return 0


def _fmt(value) -> str:
    return f"{value:,.0f}" if isinstance(value, float) else str(value)


def summary(spec) -> str:
    """A readable account of a ModelSpec: dims, flags, stack, and per kind the ops, params and measured bytes."""
    data = spec.to_dict()
    structure = {"name", "arch", "layers", "ops", "flavours", "params", "measured"}
    lines = [f"{data['name']}  ({data['arch']})"]
    dims = [f"{k}={v}" for k, v in data.items() if k not in structure and not isinstance(v, bool)]
    flags = [k for k, v in data.items() if v is True]
    lines.append("  " + "  ".join(dims))
    lines.append("  flags: " + (", ".join(flags) or "none"))
    lines.append("  stack: " + " ".join(f"{g['kind']}×{g['count']}" for g in data["layers"]))
    params = data["params"]
    lines.append(f"  params: embedding {params['embedding']:,}  output {params['output']:,}  final_norm {params['final_norm']:,}")
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
        lines.append("      " + " ".join(f"{op}={_fmt(per_op[op])}" for op in OPS + (OTHER,) if per_op[op]))
    return "\n".join(lines)
