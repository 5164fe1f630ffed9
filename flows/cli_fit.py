"""`speccat fit`: every layout and switch set whose per-rank memory fits the GPUs, ranked by
estimated recompute time, with the breakdown (docs/planning.md).

CONFIG is what `speccat price` takes (flows/fit_spec.py): a config file or folder, censused
now, or a repo id the catalogue holds. The setting is the grid's defaults with `--stack` and
`--set FIELD=VALUE` on top, as `price` reads them; the spec is priced from the data files at
exactly the sequence length and micro-batch asked for, and what fits is asked of the
catalogue's own planner SQL, which the view rank_fits reads too (flows/fit_engine.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys

from speccat.catalogue.datafile import parse_yaml
from speccat.catalogue.store.units import WRITTEN
from speccat.flows.cli_options import catalogue_options, epilog, units_option


def parse_size(text: str) -> float:
    """'80GiB', '141GB', '1.5TiB' or '1024B': a positive number and its unit. A bare number is
    refused: `--gpu-mem 80` means 80 GiB or 80 GB to a reader, never 80 bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not match or not match.group(2) or match.group(2).lower() not in WRITTEN or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a positive size with its unit, such as 80GiB, 141GB or 1.5TiB (B for bytes)")
    return float(match.group(1)) * WRITTEN[match.group(2).lower()]


def offload_count(text: str) -> int | str:
    """--offload-layers: a whole number of at least 1, or `auto` (every count, weighed on the frontier)."""
    return text if text == "auto" else count(1)(text)


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
        **epilog(
            "speccat fit meta-llama/Llama-3.1-8B-Instruct --gpu-mem 80GiB --seq 8192 --gpus 8",
            "speccat fit Qwen/Qwen3-30B-A3B --seq 32768 --gpus 16 --ep 8 --zero 1 --accelerator H200-SXM --json",
            "speccat fit meta-llama/Llama-3.1-8B-Instruct --gpus 1 --gpu-mem 80GiB --max-seq",
            "speccat fit my-model/config.json --stack megatron --set flash_attention=false --seq 2048 --gpus 64 --tp 8 --pp 8 --recipe zero_mixed_adam",
        ),
    )
    fit.add_argument("config", metavar="CONFIG", help="a config.json or a folder holding one (censused now), or a repo id the catalogue holds")
    fit.add_argument("--stack", help="the training stack priced: transformers or megatron (default: the settings grid's)")
    fit.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="fields",
                     help="any other setting field of catalogue/records/settings.yaml, e.g. --set flash_attention=false --set dtype=fp16")
    fit.add_argument("--recipe", help="the optimizer recipe of catalogue/records/states.yaml (default: its default_recipe)")
    fit.add_argument("--gpu-mem", type=parse_size, help="memory per GPU, such as 80GiB or 141GB (default: the accelerator's)")
    fit.add_argument("--seq", type=count(1), help="sequence length (required, but with --max-seq)")
    fit.add_argument("--gpus", type=count(1), help="GPUs in all (required, but with --min-gpus)")
    fit.add_argument("--micro-batch", type=count(1), help="sequences per micro-batch (default 1)")
    fit.add_argument("--max-seq", action="store_true", help="answer the longest sequence that fits (a multiple of 256 tokens, catalogue/records/inverse.yaml)")
    fit.add_argument("--max-micro-batch", action="store_true", help="answer the largest micro-batch that fits at --seq")
    fit.add_argument("--min-gpus", action="store_true", help="answer the fewest GPUs at which something fits at --seq")
    for name, what in (("dp", "data"), ("tp", "tensor"), ("pp", "pipeline"), ("ep", "expert"), ("cp", "context")):
        fit.add_argument(f"--{name}", type=count(1), help=f"hold the {what}-parallel size at this value")
    fit.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="hold the ZeRO stage (default: try 0 to 3)")
    fit.add_argument("--vpp", type=count(1), default=1, help="virtual pipeline stages per rank (interleaved 1F1B; default 1)")
    fit.add_argument("--schedule", help="the pipeline schedule, a name of catalogue/records/schedules.yaml "
                     "(default: the file's default for --vpp: 1F1B, or interleaved above 1)")
    fit.add_argument("--loss", help="the loss kernel after the head, a name of catalogue/records/ends.yaml's losses: eager, chunked, "
                     "fused-linear (default: the model's own, eager)")
    fit.add_argument("--offload-layers", type=offload_count, metavar="N|auto",
                     help="offload the activations of each rank's first N layers to host memory (reported as host bytes, and the "
                     "copy's seconds over the accelerator's host link); auto: try every count, offload a third action beside "
                     "keeping and recomputing, and list the (set, count) pairs no other beats on bytes, recompute and copy time")
    fit.add_argument("--moe-overload", type=float, metavar="F", help="the busiest expert-parallel rank's routed tokens over an even "
                     "share (Megatron-LM's overload factor; default 1): the routed experts' activations times F")
    fit.add_argument("--accelerator", help="a name of catalogue/records/accelerators.yaml (default: the file's default, H100-SXM); "
                     "its memory is the default --gpu-mem, and tp stays within its node")
    fit.add_argument("--top", type=count(0), default=20, help="rows to print (default 20; 0: all)")
    catalogue_options(fit)
    units_option(fit)
    fit.add_argument("--json", action="store_true", help="print one JSON object (bytes as numbers)")
    fit.set_defaults(handler=fit_command)


def fitter(args: argparse.Namespace, spec: dict, name: str):
    """(run, budget): run(seq, micro_batch, gpus) lists the rows that fit (flows/fit_engine.py)
    with everything else the command line holds."""
    from speccat.flows.fit_engine import fits, planning_data

    accelerators = planning_data()["accelerators"]
    if args.accelerator is None:
        args.accelerator = next(name for name, a in accelerators.items() if a.default)
    budget = args.gpu_mem if args.gpu_mem is not None else accelerators[args.accelerator].memory
    fixed = {"dp": args.dp, "tp": args.tp, "pp": args.pp, "ep": args.ep, "cp": args.cp, "vpp": args.vpp}
    zeros = (args.zero,) if args.zero is not None else (0, 1, 2, 3)

    def run(seq: int, micro_batch: int, gpus: int) -> list:
        return fits(
            spec, name, args.accelerator, gpus=gpus, seq=seq, budget=budget, micro_batch=micro_batch, fixed=fixed, zeros=zeros,
            recipe=args.recipe, setting=args.setting, schedule=args.schedule, loss=args.loss, offload_layers=args.offload_layers or 0,
        )  # fmt: skip

    return run, budget


QUESTIONS = {"max_seq": "--max-seq", "max_micro_batch": "--max-micro-batch", "min_gpus": "--min-gpus"}


def check_question(args: argparse.Namespace) -> None:
    """`args.question`: the inverse question asked (None: none), refusing one asked beside the
    value it searches, or a value left out that no question searches."""
    from speccat.catalogue.errors import InputError

    asked = [q for q in QUESTIONS if getattr(args, q)]
    if len(asked) > 1:
        raise InputError("bad_argument", "one of --max-seq, --max-micro-batch, --min-gpus at a time")
    for question, value, what in (("max_seq", "seq", "the sequence length"), ("min_gpus", "gpus", "the GPU count"),
                                  ("max_micro_batch", "micro_batch", "the micro-batch")):  # fmt: skip
        flag = "--" + value.replace("_", "-")
        if getattr(args, question) and getattr(args, value) is not None:
            raise InputError("bad_argument", f"{QUESTIONS[question]} searches {what}: leave {flag} out")
        if value != "micro_batch" and not getattr(args, question) and getattr(args, value) is None:
            raise InputError("bad_argument", f"{flag} is required (or {QUESTIONS[question]})")
    args.question = asked[0] if asked else None


def answer(args: argparse.Namespace, run) -> tuple[list, dict | None]:
    """The rows to print and, for an inverse question, its answer (catalogue/records/inverse.py);
    the searched value is set on `args` (None when nothing fits at the smallest value tried)."""
    from speccat.catalogue.records.inverse import fewest, largest, load_bounds
    from speccat.catalogue.records.layouts import LayoutError

    if args.question != "max_micro_batch" and args.micro_batch is None:
        args.micro_batch = 1
    if args.question is None:
        return run(args.seq, args.micro_batch, args.gpus), None
    bounds = load_bounds()
    if args.question == "max_seq":
        step, found = bounds.seq_step, largest(lambda s: run(s, args.micro_batch, args.gpus), bounds.seq_step, bounds.seq_limit)
        args.seq = found.value
    elif args.question == "max_micro_batch":
        step = bounds.micro_batch_step
        found = largest(lambda b: run(args.seq, b, args.gpus), step, bounds.micro_batch_limit)
        args.micro_batch = found.value
    else:
        def run_or_none(gpus: int) -> list:
            try:
                return run(args.seq, args.micro_batch, gpus)
            except LayoutError:  # the held fields cannot be laid out on this count: nothing fits it
                return []

        step, found = 1, fewest(run_or_none, bounds.gpus_limit)
        args.gpus = found.value
    return list(found.rows), {"ask": args.question, "answer": found.value, "limited": found.limited, "tried": found.tried, "step": step}


def said(question: dict) -> str:
    """The answer to an inverse question in a line."""
    value, step, limited = question["answer"], question["step"], question["limited"]
    if question["ask"] == "min_gpus":
        if value is None:
            return "fewest GPUs that fit: none up to the search's limit"
        return f"fewest GPUs that fit: {value} (the powers of two below did not, nor any count between the last of them and {value})"
    what = {"max_seq": ("longest sequence that fits", "tokens"), "max_micro_batch": ("largest micro-batch that fits", "sequences")}[question["ask"]]
    if value is None:
        return f"{what[0]}: none: nothing fits at {step} {what[1]}"
    if limited:
        return f"{what[0]}: at least {value} {what[1]}, the search's limit (catalogue/records/inverse.yaml)"
    return f"{what[0]}: {value} {what[1]} ({value + step} do not)"


# Setting fields fit decides itself: the layout (tp, cp), --seq, --micro-batch, and the micro-batches in flight.
OWN_FIELDS = {"seq_length": "--seq", "micro_batch": "--micro-batch", "tp": "--tp", "cp": "--cp", "in_flight": "the pipeline schedule"}


def check_inputs(args: argparse.Namespace) -> None:
    """Read --stack, --set and --recipe before any census: `args.setting` (the setting fields
    over the grid's defaults, checked by the grid) and `args.recipe` (the states file's name)."""
    from speccat.catalogue.errors import InputError
    from speccat.catalogue.records.schedules import load_schedules
    from speccat.flows.fit_engine import planning_data

    check_question(args)
    data = planning_data()
    args.setting = {}
    for pair in args.fields:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise InputError("bad_argument", f"--set {pair!r}: expected FIELD=VALUE")
        if name in OWN_FIELDS:
            raise InputError("bad_argument", f"--set {name}: fit sets it from {OWN_FIELDS[name]}")
        args.setting[name] = parse_yaml(text)
    if args.stack is not None:
        args.setting["stack"] = args.stack
    if args.moe_overload is not None:
        if not args.moe_overload >= 1:
            raise InputError("bad_argument", f"--moe-overload {args.moe_overload:g}: the busiest rank's share of an even load, 1 or more")
        if "dropless_tok_factor" in args.setting:
            raise InputError("bad_argument", "--moe-overload sets dropless_tok_factor: leave --set dropless_tok_factor out")
        args.setting["dropless_tok_factor"] = args.moe_overload
    args.chosen = data["grid"].setting({**args.setting, "seq_length": args.seq or 1, "micro_batch": args.micro_batch or 1})  # refuses a bad field or value
    states = data["states"]
    args.recipe = args.recipe or states.default_recipe
    if args.recipe not in states.recipes:
        raise InputError("bad_argument", f"--recipe {args.recipe}: known: {', '.join(states.recipes)}")
    accelerators = data["accelerators"]
    if args.accelerator is not None and args.accelerator not in accelerators:
        raise InputError("bad_argument", f"--accelerator {args.accelerator}: known: {', '.join(accelerators)}")
    schedules = load_schedules()
    args.schedule = args.schedule or schedules.default(args.vpp).name
    schedule = schedules.by_name.get(args.schedule)
    if schedule is None:
        raise InputError("bad_argument", f"--schedule {args.schedule}: known: {', '.join(schedules.by_name)}")
    if not schedule.takes(args.vpp):
        needs = "--vpp above 1" if schedule.interleaved else "--vpp 1"
        raise InputError("bad_argument", f"--schedule {args.schedule} runs with {needs}, not --vpp {args.vpp}")
    if args.pp is not None and args.pp < schedule.min_pp:
        raise InputError("bad_argument", f"--schedule {args.schedule} needs --pp {schedule.min_pp} or more, not --pp {args.pp}")
    ends = data["ends"]
    args.loss = args.loss or ends.default_loss
    if args.loss not in ends.losses:
        raise InputError("bad_argument", f"--loss {args.loss}: known: {', '.join(ends.losses)}")


def described(args: argparse.Namespace) -> dict:
    """What the answer assumed, named: the stack and setting fields, the recipe and its source,
    the accelerator."""
    from speccat.catalogue.records.schedules import load_schedules
    from speccat.flows.fit_engine import planning_data

    data = planning_data()
    states = data["states"]
    per_param = states.recipes[args.recipe]
    setting = {k: v for k, v in args.chosen.items() if k not in ("setting_id", *OWN_FIELDS)}
    for name, fixed in data["grid"].fixed.items():  # named at the grid's value too (attention_kernel=auto)
        setting.setdefault(name, fixed.default)
    return {
        "stack": setting.pop("stack"),
        "setting": setting,
        "recipe": {"name": args.recipe, "bytes_per_param": {**per_param, "total": sum(per_param.values())}, "source": states.sources[args.recipe]},
        "accelerator": args.accelerator,
        "schedule": {"name": args.schedule, "source": load_schedules().by_name[args.schedule].source},
        "loss": {"name": args.loss, "chunk_tokens": data["ends"].losses[args.loss].chunk, "source": data["ends"].losses[args.loss].source},
        "offload_layers": args.offload_layers or 0,
    }


def beyond_positions(spec: dict, seq: int) -> str | None:
    """A note when `seq` is longer than the positions the config declares (priced all the same:
    RoPE scaling or a longer-context checkpoint may extend them), else None."""
    positions = spec.get("max_position_embeddings")
    if isinstance(positions, int) and seq > positions:
        return f"seq {seq} is beyond the model's {positions} positions (priced anyway; RoPE scaling may extend them)"
    return None


def fit_command(args: argparse.Namespace) -> int:
    from speccat.flows.fit_spec import load_spec

    check_inputs(args)
    repo_id, spec, origin = load_spec(args)
    if args.moe_overload is not None and (spec.get("num_experts") or 1) <= 1:
        from speccat.catalogue.errors import InputError

        raise InputError("bad_argument", f"--moe-overload: {repo_id} has no routed experts")
    run, budget = fitter(args, spec, repo_id)
    rows, question = answer(args, run)
    shown = rows if args.top == 0 else rows[: args.top]
    note = beyond_positions(spec, args.seq) if args.seq is not None else None
    about = described(args)
    if args.json:
        dicts = [{**r.as_dict(), "beyond_positions": note is not None} for r in shown]
        print(json.dumps({"repo_id": repo_id, "spec_source": origin, **about, "budget_bytes": math.ceil(budget), "fits": len(rows),
                          "question": question, "beyond_positions": note, "rows": dicts}))  # fmt: skip
        return 0
    from speccat.catalogue.store.present import format_bytes, human_bytes, table

    if question is not None:
        print(said(question))

    searched = args.offload_layers == "auto"  # offload weighed: each row names its count
    pairs = "(layout, switch set, offload count)" if searched else "(layout, switch set)"
    print(f"{repo_id}: {len(rows)} {pairs} pairs fit {human_bytes(budget)} per GPU "
          f"on {args.gpus or 'no number of'} GPUs at seq {args.seq or 'none'}, micro-batch {args.micro_batch or 'none'}; showing {len(shown)}"
          + (f"; {note}" if note else ""))  # fmt: skip
    recipe = about["recipe"]
    fields = " ".join(f"{k}={v}" for k, v in about["setting"].items())
    print(f"spec: {origin}; stack {about['stack']} ({fields}); recipe {recipe['name']} "
          f"({recipe['bytes_per_param']['total']:g} B/param: {recipe['source']}); accelerator {about['accelerator']}; "
          f"schedule {about['schedule']['name']}; loss {about['loss']['name']}"
          + (f"; {offloaded(args.offload_layers)}" if args.offload_layers else ""))  # fmt: skip
    sizes = ("total", "activations", "ends", "loss_working", "backward", "weight", "grad", "optimizer") + (("host",) if args.offload_layers else ())
    columns = ("dp", "tp", "pp", "ep", "cp", "zero", "switch_set", *(("offload",) if searched else ()), *sizes,
               "recompute_ms", "overhead_%", "ms_per_seq")
    columns += ("offload_ms",) if args.offload_layers else ()
    columns += ("note",) if note else ()
    body = []
    for r in shown:
        d = r.as_dict()
        body.append([str(d[c]) for c in columns[:6]] + [d["switch_set"]] + ([str(d["offload_layers"])] if searched else [])
                    + [format_bytes(d[c], args.units) for c in sizes]
                    + [f"{d['recompute_s'] * 1e3:.2f}", f"{d['overhead'] * 100:.2f}", f"{d['recompute_s_per_seq'] * 1e3:.2f}"]
                    + ([f"{d['offload_s'] * 1e3:.2f}"] if args.offload_layers else [])
                    + (["beyond positions"] if note else []))  # fmt: skip
    print(table(columns, body))
    if not rows:
        print("nothing fits: try more GPUs, a shorter sequence or a larger --gpu-mem", file=sys.stderr)
    return 0


def offloaded(asked: int | str) -> str:
    """The second line's words for --offload-layers."""
    if asked == "auto":
        return "offload weighed: every count of each rank's first layers offloaded to host memory tried"
    return f"the first {asked} layers of each rank offloaded to host memory"
