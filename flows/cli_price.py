"""`speccat price CONFIG`: census one config and price it at one setting.

CONFIG is a config.json, a folder holding one, or a repo id the catalogue holds (cli_census.py
`read_config`). A setting at which the model cannot be laid out (catalogue/records/layouts.yaml:
heads or kv heads that tp cannot split, a sequence its sharding cannot split) is refused with
reason `infeasible`, exit 2.

The setting is the grid's defaults (catalogue/records/settings.yaml: each field's first value) with
--seq/--micro-batch/--tp/--cp and any `--set FIELD=VALUE` on top. `--switches` picks what is
recomputed: none, all, full (full recompute), or switch names joined by commas. The config
is censused, priced and checked as the night does it (flows/analysis.py `census_priced`), so a
config the night stores unpriced (a kind priced beyond the records' tolerance of what the census
measured) is refused with the night's reason. A bad setting, an unknown switch or a spec that
cannot be priced exits 2 with one line, or with {"error": {"reason", "message"}} on stdout
under --json; census refusals are cli.py's.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from speccat.catalogue.datafile import parse_yaml
from speccat.catalogue.store.units import PRINTED

FULL = "full"


def register(subparsers) -> None:
    from speccat.flows.cli_census import CONFIG_HELP
    from speccat.flows.targets import DB_ENV, DEFAULT_DB

    parser = subparsers.add_parser(
        "price",
        help="census one config.json and price its activation memory at one setting",
        description="Census a config, then price the bytes each kind of layer keeps for backward, per rank "
        "and micro-batch, and the whole model's total, at one setting and one set of recompute switches.",
        epilog="examples:\n  speccat price flows/snapshot/Qwen__Qwen3-8B --seq 8192 --tp 2\n"
        "  speccat price flows/snapshot/Qwen__Qwen3-8B/config.json --switches attBMM,softmax --units GiB\n"
        "  speccat price Qwen/Qwen3-8B --switches full --json      # a repo id the catalogue holds",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", metavar="CONFIG", help=CONFIG_HELP)
    parser.add_argument("--db", default=None, help=f"the catalogue a repo id is looked up in (default ${DB_ENV}, else {DEFAULT_DB})")
    parser.add_argument("--seq", type=int, dest="seq_length", help="sequence length (default: the settings grid's)")
    parser.add_argument("--micro-batch", type=int, dest="micro_batch", help="micro-batch size (default 1)")
    parser.add_argument("--tp", type=int, help="tensor-parallel size (default 1)")
    parser.add_argument("--cp", type=int, help="context-parallel size (default 1)")
    parser.add_argument("--stack", help="the training stack priced: transformers or megatron (default: the settings grid's)")
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
    parser.add_argument(
        "--units", choices=tuple(PRINTED), default="human",
        help="how byte figures print (human: B, KiB, MiB, GiB as fits); --json always gives bytes",
    )  # fmt: skip
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
        fields[name.strip()] = parse_yaml(text)
    for name in ("stack", "seq_length", "micro_batch", "tp", "cp"):
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

    from speccat.catalogue.records.cost import load_costs, stored_version
    from speccat.catalogue.records.ends import load_ends
    from speccat.catalogue.records.pricing import model_totals, price_spec, stack_counts
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.settings import load_settings

    records, grid = load_records(), load_settings()
    setting = grid.setting(setting_overrides)
    mask = switch_mask(records, switches)  # bad settings and switches are refused before the census

    from speccat.catalogue.records.layouts import check_feasible
    from speccat.flows.analysis import census_priced

    spec = census_priced(config, name).checked()  # the night's census, pricing and check: its refusal too
    counts = stack_counts(spec)
    chosen = grid.with_settings([setting])
    check_feasible(spec, records, chosen)
    tables = price_spec(spec, records, chosen)
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
        "records_version": stored_version(records, load_costs(records), load_ends(records)),
        "setting": dict(setting),
        "switches": FULL if mask is None else list(records.switches_of(mask)),
        "kinds": kinds,
        "model_total": model_total,
    }


def summary(result: dict, units: str = "human") -> str:
    from speccat.catalogue.store.present import format_bytes, table

    setting = " ".join(f"{k}={v}" for k, v in result["setting"].items() if k != "setting_id")
    switches = result["switches"]
    recomputed = "full recompute (each layer keeps its input)" if switches == FULL else (", ".join(switches) or "none")
    columns = ["kind", "layers", "attention", "ffn", "norm", "total"]
    rows = [
        [kind, str(v["layers"]), *(format_bytes(v[p], units) if p in v else "" for p in columns[2:])]
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
            f"model total: {format_bytes(total, units)}",
        ]
    )


def price_command(args: argparse.Namespace) -> int:
    from speccat.census.intake.config import precheck
    from speccat.flows.cli_census import read_config

    config, name = read_config(args.config, args.db)
    precheck(config)  # absurd configs are refused before torch is even imported
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # read when transformers is first imported
    result = price(config, args.name or name, overrides(args), args.switches)
    print(json.dumps(result) if args.json else summary(result, args.units))
    return 0
