"""`speccat fit`: every layout and switch set whose per-rank memory fits the GPUs, ranked by
estimated recompute time, with the breakdown (docs/planning.md).

The spec comes from the catalogue (the repo's at the latest census version); the prices, the
recompute costs, the model states and the model's ends are computed from the data files
(catalogue/records/rank.py), at exactly the sequence length and micro-batch asked for.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import re
import sys

from speccat.catalogue.errors import ReasonError
from speccat.catalogue.vocabulary import REASONS
from speccat.flows.cli_catalogue import _catalogue_options, _epilog, _target, _units_option

UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_size(text: str) -> float:
    """'80GiB', '141GB', '1.5TiB' or '1024B': a positive number and its unit. A bare number is
    refused: `--gpu-mem 80` means 80 GiB or 80 GB to a reader, never 80 bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not match or not match.group(2) or match.group(2).lower() not in UNITS or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a positive size with its unit, such as 80GiB, 141GB or 1.5TiB (B for bytes)")
    return float(match.group(1)) * UNITS[match.group(2).lower()]


def count(low: int):
    """An argparse type: a whole number of at least `low`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r}: at least {low}")
        return value

    return parse


def register(subparsers: argparse._SubParsersAction) -> None:
    fit = subparsers.add_parser(
        "fit",
        help="every layout and switch set whose per-rank memory fits, ranked by recompute time",
        description="List every parallel layout (dp, tp, pp, ep, ZeRO stage) of --gpus GPUs and every "
        "switch set no other beats on both memory and recompute time, whose fullest pipeline stage fits "
        "--gpu-mem: activations of the stage's layers times the micro-batches in flight, the embedding, "
        "final norm and logits, and weights, gradients and optimizer states. Ranked by estimated "
        "recompute time per sequence on --accelerator. Layouts that layouts.yaml refuses (heads "
        "not divisible by tp, ...) are left out.",
        **_epilog(
            "speccat fit meta-llama/Llama-3.1-8B-Instruct --gpu-mem 80GiB --seq 8192 --gpus 8",
            "speccat fit Qwen/Qwen3-30B-A3B --seq 32768 --gpus 16 --ep 8 --zero 1 --accelerator H200-SXM --json",
        ),
    )
    fit.add_argument("repo_id", metavar="REPO_ID")
    fit.add_argument("--gpu-mem", type=parse_size, help="memory per GPU, such as 80GiB or 141GB (default: the accelerator's)")
    fit.add_argument("--seq", type=count(1), required=True, help="sequence length")
    fit.add_argument("--gpus", type=count(1), required=True, help="GPUs in all")
    fit.add_argument("--micro-batch", type=count(1), default=1, help="sequences per micro-batch (default 1)")
    for name, what in (("dp", "data"), ("tp", "tensor"), ("pp", "pipeline"), ("ep", "expert"), ("cp", "context")):
        fit.add_argument(f"--{name}", type=count(1), help=f"hold the {what}-parallel size at this value")
    fit.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="hold the ZeRO stage (default: try 0 to 3)")
    fit.add_argument("--vpp", type=count(1), default=1, help="virtual pipeline stages per rank (interleaved 1F1B; default 1)")
    fit.add_argument("--accelerator", help="a name of catalogue/records/accelerators.yaml (default: the file's default, H100-SXM); "
                     "its memory is the default --gpu-mem, and tp stays within its node")
    fit.add_argument("--top", type=count(0), default=20, help="rows to print (default 20; 0: all)")
    _catalogue_options(fit)
    _units_option(fit)
    fit.add_argument("--json", action="store_true", help="print one JSON object (bytes as numbers)")
    fit.set_defaults(handler=fit_command)


class NightRefusal(ReasonError):
    """A repo the catalogue's latest night refused, with the night's own reason (of whichever
    group of the vocabulary holds it: a census or fetch reason, a price stage's records reason)."""

    def __init__(self, reason: str, message: str):
        self.group = next(group for group, codes in REASONS.items() if reason in codes)
        super().__init__(reason, message)


def load_spec(args: argparse.Namespace) -> tuple[str, dict]:
    """The stored repo id REPO_ID names (exactly, else ignoring case) and its spec. A repo the
    latest night refused (at any stage: no spec, or a spec it would not price) is refused with
    the night's reason and message."""
    from speccat import sql
    from speccat.catalogue.errors import InputError
    from speccat.catalogue.store import present

    with _target(args).open_readonly() as con:
        repo_id = present.resolve_repo_id(con, args.repo_id)
        found = present.run(con, sql.load("show/spec"), {"repo_id": repo_id})
        refusal = present.run(con, sql.load("show/refusal"), {"repo_id": repo_id}).rows
    if refusal:
        stage, reason, message = refusal[0]
        raise NightRefusal(reason, f"{repo_id}: the latest night refused it at the {stage} stage: {message}")
    if not found.rows:
        raise InputError("not_found", f"{repo_id} has no spec at the latest census version (see speccat show {repo_id})")
    return repo_id, json.loads(found.rows[0][1])


@functools.lru_cache(maxsize=1)
def planning_data() -> dict:
    """The data files fit reads, parsed once per process."""
    from speccat.catalogue.records.cost import load_accelerators, load_costs
    from speccat.catalogue.records.head import load_head
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.settings import load_settings
    from speccat.catalogue.records.states import load_states

    records = load_records()
    return {"records": records, "grid": load_settings(), "costs": load_costs(records), "states": load_states(),
            "head": load_head(records), "accelerators": load_accelerators()}  # fmt: skip


def fit_rows(args: argparse.Namespace, spec: dict) -> tuple[list, float]:
    from speccat.catalogue.records.rank import fits
    from speccat.census.family import family_for

    data = planning_data()
    accelerators = data["accelerators"]
    if args.accelerator is None:
        args.accelerator = next(name for name, a in accelerators.items() if a.default)
    if args.accelerator not in accelerators:
        from speccat.catalogue.errors import InputError

        raise InputError("bad_argument", f"--accelerator {args.accelerator}: known: {', '.join(accelerators)}")
    accelerator = accelerators[args.accelerator]
    budget = args.gpu_mem if args.gpu_mem is not None else accelerator.memory
    fixed = {"dp": args.dp, "tp": args.tp, "pp": args.pp, "ep": args.ep, "cp": args.cp, "vpp": args.vpp}
    zeros = (args.zero,) if args.zero is not None else (0, 1, 2, 3)
    rows = fits(
        spec, family_for(spec["arch"]).pricing_defaults(), data["records"], data["grid"], data["costs"], data["states"],
        data["head"], accelerator, gpus=args.gpus, seq=args.seq, budget=budget, micro_batch=args.micro_batch,
        fixed=fixed, zeros=zeros,
    )  # fmt: skip
    return rows, budget


def beyond_positions(spec: dict, seq: int) -> str | None:
    """A note when `seq` is longer than the positions the config declares (priced all the same:
    RoPE scaling or a longer-context checkpoint may extend them), else None."""
    positions = spec.get("max_position_embeddings")
    if isinstance(positions, int) and seq > positions:
        return f"seq {seq} is beyond the model's {positions} positions (priced anyway; RoPE scaling may extend them)"
    return None


def fit_command(args: argparse.Namespace) -> int:
    repo_id, spec = load_spec(args)
    rows, budget = fit_rows(args, spec)
    shown = rows if args.top == 0 else rows[: args.top]
    note = beyond_positions(spec, args.seq)
    if args.json:
        dicts = [{**r.as_dict(), "beyond_positions": note is not None} for r in shown]
        print(json.dumps({"repo_id": repo_id, "budget_bytes": math.ceil(budget), "fits": len(rows), "beyond_positions": note, "rows": dicts}))
        return 0
    from speccat.catalogue.store.present import format_bytes, human_bytes, table

    print(f"{repo_id}: {len(rows)} (layout, switch set) pairs fit {human_bytes(budget)} per GPU "
          f"on {args.gpus} GPUs at seq {args.seq}, micro-batch {args.micro_batch}; showing {len(shown)}"
          + (f"; {note}" if note else ""))  # fmt: skip
    columns = ("dp", "tp", "pp", "ep", "cp", "zero", "switch_set", "total", "activations", "ends", "weight", "grad", "optimizer", "recompute_ms", "overhead_%", "ms_per_seq")
    columns += ("note",) if note else ()
    body = []
    for r in shown:
        d = r.as_dict()
        body.append([str(d[c]) for c in columns[:6]] + [d["switch_set"]] + [format_bytes(d[c], args.units) for c in columns[7:13]]
                    + [f"{d['recompute_s'] * 1e3:.2f}", f"{d['overhead'] * 100:.2f}", f"{d['recompute_s_per_seq'] * 1e3:.2f}"]
                    + (["beyond positions"] if note else []))  # fmt: skip
    print(table(columns, body))
    if not rows:
        print("nothing fits: try more GPUs, a shorter sequence or a larger --gpu-mem", file=sys.stderr)
    return 0
