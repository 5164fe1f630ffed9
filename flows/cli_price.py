"""`speccat price CONFIG.json`: census one config and price it at one setting.

The setting is the grid's defaults (catalogue/records/settings.yaml: each field's first value) with
--seq/--micro-batch/--tp/--cp and any `--set FIELD=VALUE` on top. `--switches` picks what is
recomputed: none, all, full (full recompute), or switch names joined by commas. A bad
setting, an unknown switch or a spec that cannot be priced exits 2 with one line, or with
{"error": {"reason", "message"}} on stdout under --json; census refusals are cli.py's.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import yaml

FULL = "full"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "price",
        help="census one config.json and price its activation memory at one setting",
        description="Census a config, then price the bytes each kind of layer keeps for backward, per rank "
        "and micro-batch, and the whole model's total, at one setting and one set of recompute switches.",
    )
    parser.add_argument("config", help="path to a Hugging Face config.json")
    parser.add_argument("--seq", type=int, dest="seq_length", help="sequence length (default: the settings grid's)")
    parser.add_argument("--micro-batch", type=int, dest="micro_batch", help="micro-batch size (default 1)")
    parser.add_argument("--tp", type=int, help="tensor-parallel size (default 1)")
    parser.add_argument("--cp", type=int, help="context-parallel size (default 1)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", dest="fields",
        help="any other setting field of catalogue/records/settings.yaml, e.g. --set cp_algo=ulysses --set dtype=fp32",
    )  # fmt: skip
    parser.add_argument(
        "--switches", default="none",
        help="recomputed switches: none, all, full (full recompute) or names joined by commas "
        "(attBMM,headCast,dropout,softmax,normOp,gather,ffAct,attUp)",
    )  # fmt: skip
    parser.add_argument("--name", help="the spec's name (default: ORG/NAME from an ORG__NAME/config.json path)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON (a stable contract)")
    parser.set_defaults(handler=price_command)


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The setting fields the command line names; `--set` values are read as YAML scalars."""
    from speccat.catalogue.records.settings import SettingsError

    fields: dict[str, Any] = {}
    for pair in args.fields:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise SettingsError("bad_value", f"--set {pair!r}: expected FIELD=VALUE")
        fields[name.strip()] = yaml.safe_load(text)
    for name in ("seq_length", "micro_batch", "tp", "cp"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    return fields


def switch_mask(records, text: str) -> int | None:
    """The mask `--switches` names, or None for full recompute."""
    text = text.strip()
    if text == FULL:
        return None
    if text == "none":
        return 0
    if text == "all":
        return records.n_masks - 1
    return records.mask_of(name.strip() for name in text.split(",") if name.strip())


def price(config: dict, name: str, setting_overrides: dict, switches: str) -> dict:
    """Census `config` and price it: the `price --json` mapping (docs/pricing.md)."""
    import pyarrow.compute as pc

    from speccat.catalogue.records.pricing import model_totals, price_spec, stack_counts
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.settings import load_settings

    records, grid = load_records(), load_settings()
    setting = grid.setting(setting_overrides)
    mask = switch_mask(records, switches)  # bad settings and switches are refused before the census

    from speccat.census import run_census
    from speccat.census.family import family_for

    spec = run_census(config, name=name)
    counts = stack_counts(spec)
    tables = price_spec(spec, family_for(spec["arch"]).pricing_defaults(), records, grid.with_settings([setting]))
    model = model_totals(spec, tables)
    if mask is None:
        kinds = {row["kind"]: {"layers": counts[row["kind"]], "total": row["kept"]} for row in tables.full_prices.to_pylist()}
        model_total = model.full_prices.column("kept")[0].as_py()
    else:
        rows = tables.layer_prices.filter(pc.field("mask") == mask).to_pylist()
        kinds = {
            r["kind"]: {"layers": counts[r["kind"]], **{p: r[p] for p in ("attention", "ffn", "norm", "total")}}
            for r in rows
        }
        model_total = model.layer_prices.filter(pc.field("mask") == mask).column("total")[0].as_py()
    return {
        "name": spec["name"],
        "records_version": records.version,
        "setting": dict(setting),
        "switches": FULL if mask is None else list(records.switches_of(mask)),
        "kinds": kinds,
        "model_total": model_total,
    }


def summary(result: dict) -> str:
    from speccat.catalogue.store.present import human_bytes, table

    setting = " ".join(f"{k}={v}" for k, v in result["setting"].items() if k != "setting_id")
    switches = result["switches"]
    recomputed = "full recompute (each layer keeps its input)" if switches == FULL else (", ".join(switches) or "none")
    columns = ["kind", "layers", "attention", "ffn", "norm", "total"]
    rows = [
        [kind, str(v["layers"]), *(f"{v[p]:,.0f}" if p in v else "" for p in columns[2:])]
        for kind, v in result["kinds"].items()
    ]
    total = result["model_total"]
    return "\n".join(
        [
            f"{result['name']}  (records {result['records_version']})",
            f"setting: {setting}",
            f"recomputed: {recomputed}",
            "bytes one layer keeps, per rank and micro-batch:",
            table(columns, rows).rstrip("\n"),
            f"model total: {total:,.0f} bytes ({human_bytes(total)})",
        ]
    )


def price_command(args: argparse.Namespace) -> int:
    from speccat.census import load_config_file
    from speccat.census.config import precheck
    from speccat.flows.cli_census import default_name

    path = Path(args.config)
    config = load_config_file(path)
    precheck(config)  # absurd configs are refused before torch is even imported
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # read when transformers is first imported
    result = price(config, args.name or default_name(path), overrides(args), args.switches)
    print(json.dumps(result) if args.json else summary(result))
    return 0
