"""The GPU check, `python -m bench gpu`: what a real forward and backward keeps on CUDA, kind by
kind, against the catalogue's price (docs/census.md, "The GPU check").

For each config (the shipped snapshot unless named with --config) and each sequence length
(--seq, 4096 and 16384 unless given):

- the census states the kinds and where each first stands in the stack, and the records price
  each kind at that length (the grid's default setting, nothing recomputed);
- a model of the layers up to the last of those firsts is built on the GPU in bf16 with random
  weights and transformers' sdpa attention (the model's own attention where it refuses sdpa),
  its experts run by grouped_mm as the census assumes, and run forward and backward from random
  input embeddings; saved-tensor hooks, open only while a kind's layer runs, give the bytes
  autograd kept for it, parameters and buffers left out, per token;
- the same run as the census makes it (fake tensors, speccat's attention kernel) lists the
  tensors it keeps, and the largest tensors kept by one run and not the other are printed;
- on CUDA, each kind's backward peak, the most bytes the allocator holds at once in the layer's
  backward beyond what it held when that began, beside the census's (its spec's measured
  backward_peak, per token): what the production kernels' backward really allocates.

No test or CI step runs it on a GPU: without CUDA it says so in one line and exits 0. `--device
cpu` runs the real side on the CPU (the tests check the harness that way).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from contextlib import nullcontext
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

SNAPSHOT = Path(__file__).resolve().parent.parent / "flows" / "snapshot"
SEQS = (4096, 16384)
SHOWN_DIFFERENCES = 3


def first_layers(spec, layer_types: list | None) -> dict[tuple[str, str], int]:
    """(kind, layer type) -> the index of its first layer in the stack: one layer of each kind, and
    of each layer type (the config's `layer_types`: sliding or full attention) within a kind, since
    a GPU may keep different sizes for layers the census states as one kind."""
    first: dict[tuple[str, str], int] = {}
    index = 0
    for run in spec["layers"]:
        for i in range(index, index + run["count"]):
            kind_type = layer_types[i] if layer_types and i < len(layer_types) else ""
            first.setdefault((run["kind"], str(kind_type)), i)
        index += run["count"]
    return first


def prices(spec, seq: int) -> dict[str, float]:
    """kind -> the records' bytes per token of one layer at sequence length `seq` (the grid's
    default setting otherwise, nothing recomputed)."""
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.pricing import price_layers
    from speccat.catalogue.records.settings import load_settings

    grid = load_settings()
    one = grid.with_settings([grid.setting({"seq_length": seq})])
    priced = price_layers(spec, load_records(), one)
    return {kind: float(priced.total[i, 0, 0]) / seq for i, kind in enumerate(priced.kinds)}


def resolved(config: dict):
    """The config objects as the census resolves them (an alias's model_type mapped first)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from speccat.census.intake import remote
    from speccat.census.intake.resolve import resolve_config

    return resolve_config(remote.resolve(config, CONFIG_MAPPING))


def night_refusal(spec) -> str | None:
    """The reason code the night stores `spec` without prices (the records' price beyond their
    tolerance of what the census measured: flows/analysis.py checked_points), None where it prices it. Such a
    row's price is printed for comparison only: no catalogue holds it."""
    from speccat.flows.analysis import checked_points, pricing_inputs

    try:
        checked_points(spec, *pricing_inputs())
    except ValueError as err:
        return getattr(err, "reason", "bad_value")
    return None


def shallow_build(config: dict, depth: int):
    """The census's build of `config` on meta with only its first `depth` layers: the layer count
    cut, and every per-layer list or pattern of the old count's length cut with it."""
    from speccat.census.build.model import build
    from speccat.census.structure.shapes import uses_experts_interface

    top, text, _ = resolved(config)
    stated = text.num_hidden_layers
    for name, value in list(vars(text).items()):
        if isinstance(value, (list, tuple, str)) and len(value) == stated and name != "model_type":
            setattr(text, name, value[:depth])
    text.num_hidden_layers = depth
    built = build(top, text)
    if uses_experts_interface(built.layers):
        built.model.set_experts_implementation("grouped_mm")
    return built


def kept_tensors(
    built, indices: list[int], seq: int, kernels: dict | None = None, backward: bool = True, peaks: dict | None = None
) -> dict[int, list]:
    """One forward and backward of the built decoder from input embeddings of `seq` tokens: per
    layer index asked for, the tensors autograd saved while that layer ran, each as (shape,
    dtype, its storage's bytes), one per storage (parameters, buffers and the layer's inputs
    other than its hidden states left out, as the census leaves them out). Runs on whatever the
    model's tensors are (CUDA, CPU, fake). `kernels`, where given, gains per layer index the
    attention ops that ran in it (which sdpa kernel torch chose:
    `_scaled_dot_product_flash_attention`, `..._efficient_attention`, `..._cudnn_attention`, or
    math's ops). Without `backward` the graph is only built: what it keeps is packed in the
    forward, and the backward needs as much memory again. The backward runs to the input
    embeddings, the weights' own gradients not asked for (as the census's). `peaks`, where given
    on CUDA, gains per layer index its backward peak: the most bytes the allocator held at once
    in the layer's backward beyond what it held when that began (from the gradient of its output
    to that of its input, as census/measure/backward_peak.py measures it on fake tensors)."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    from speccat.census.measure.backward_peak import backward_windows

    decoder, layers = built.decoder, built.layers
    fixed = {t.untyped_storage()._cdata for t in (*built.model.parameters(), *built.model.buffers())}
    saved: dict[int, dict[int, tuple]] = {i: {} for i in indices}
    running: list[int] = []
    window: list = []  # the layer whose backward runs, and the bytes allocated when it began

    def pack(tensor):
        if running:
            key = tensor.untyped_storage()._cdata
            if key not in fixed:  # described, not held: the backward frees what it has used, as in training
                saved[running[-1]].setdefault(key, (tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."), tensor.untyped_storage().nbytes()))
        return tensor

    def close():
        if window:
            index, start = window.pop()
            peaks[index] = torch.cuda.max_memory_allocated() - start

    def begin(index, grad):  # the gradient of the layer's output is ready: the last layer's window closes, its own opens,
        close()                # that gradient counted in it, as the census counts it
        window.append((index, torch.cuda.memory_allocated() - grad.untyped_storage().nbytes()))
        torch.cuda.reset_peak_memory_stats()

    def end(index):
        if window and window[0][0] == index:
            close()

    timed = peaks is not None and weight_device(built).type == "cuda"

    def enter(index):
        def hook(module, args, kwargs):
            # what the decoder made once for every layer (rotary tables, the mask) is no layer's own
            shared = [*args[1:], *kwargs.values()]
            while shared:
                item = shared.pop()
                if isinstance(item, (tuple, list)):
                    shared.extend(item)
                elif isinstance(item, torch.Tensor):
                    fixed.add(item.untyped_storage()._cdata)
            running.append(index)

        return hook

    def leave(*_):
        running.pop()  # returns None: a forward hook's return value would replace the layer's output

    class AttentionOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if running and "attention" in name:
                kernels.setdefault(running[-1], set()).add(name)
            return func(*args, **(kwargs or {}))

    class SdpaCalls(TorchFunctionMode):  # sdpa's math kernel is plain ops: only the call tells it ran
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if running and func is torch.nn.functional.scaled_dot_product_attention:
                kernels.setdefault(running[-1], set()).add("scaled_dot_product_attention")
            return func(*args, **(kwargs or {}))

    handles = []
    for i in indices:
        handles.append(layers[i].register_forward_pre_hook(enter(i), with_kwargs=True))
        handles.append(layers[i].register_forward_hook(leave))
    weight = built.embedding.weight
    x = torch.randn(1, seq, weight.shape[1], dtype=weight.dtype, device=weight.device, requires_grad=True)
    try:
        timing = backward_windows({i: layers[i] for i in indices}, begin, end) if timed else nullcontext()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), SdpaCalls() if kernels is not None else nullcontext(), AttentionOps() if kernels is not None else nullcontext(), timing:
            out = decoder(inputs_embeds=x, use_cache=False)
        hidden = out[0] if isinstance(out, tuple) else out.last_hidden_state
        del out
        if backward:
            torch.autograd.backward(hidden.float().sum(), inputs=[x])
            if timed:
                close()
    finally:
        for handle in handles:
            handle.remove()
    return {i: list(kept.values()) for i, kept in saved.items()}


def weight_device(built):
    return built.embedding.weight.device


def real_run(config: dict, depth: int, indices: list[int], seq: int, device: str, backward: bool = True) -> tuple[dict[int, list], dict[int, str], dict[int, int]]:
    """kept_tensors of a real model on `device`: random bf16 weights, sdpa attention (else the
    model's own). Also, per layer index, the attention that ran: sdpa's kernel (`flash`,
    `efficient`, `cudnn`, `math`), `eager` where the model refuses sdpa, '' where none ran; and
    on CUDA, with the backward, each layer's backward peak (kept_tensors' `peaks`)."""
    import torch

    built = shallow_build(config, depth)
    try:
        built.model.set_attn_implementation("sdpa")
        implementation = "sdpa"
    except Exception:  # a model that refuses sdpa runs its own (gemma-2's and gpt-oss's eager)
        built.model.set_attn_implementation("eager")
        implementation = "eager"
    built.model.to_empty(device=device)
    with torch.no_grad():
        for p in built.model.parameters():
            p.normal_(0.0, 0.02)
        for b in built.model.buffers():  # rotary tables and the like: their values change no saved size
            if b.is_floating_point():
                b.zero_()
    ops: dict[int, set] = {}
    peaks: dict[int, int] = {}
    kept = kept_tensors(built, indices, seq, ops, backward, peaks)
    return kept, {i: implementation if implementation == "eager" else sdpa_kernel(ops.get(i, ())) for i in indices}, peaks


def sdpa_kernel(ops) -> str:
    """The short name of the sdpa kernel among the attention ops that ran in a layer: `math` where
    sdpa was called and no fused kernel ran, since math is made of plain ops; '' where no sdpa ran."""
    found = sorted({word for op in ops for word in ("flash", "efficient", "cudnn") if word in op})
    return "+".join(found) or ("math" if "scaled_dot_product_attention" in ops else "")


def census_run(config: dict, depth: int, indices: list[int], seq: int) -> dict[int, list]:
    """kept_tensors as the census runs the layers: on fake tensors, with speccat's attention kernel."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from speccat.census.build.fake import make_fake

    built = shallow_build(config, depth)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    make_fake(built.model, mode)
    with mode:
        return kept_tensors(built, indices, seq)


def nbytes(kept) -> int:
    return sum(size for _, _, size in kept)


def differences(real: list, census: list) -> list[tuple[str, int]]:
    """The largest tensors one run kept and the other did not, by (shape, dtype): ('+' real only or
    '-' census only, shape and dtype, bytes), largest first."""
    a, b = Counter(real), Counter(census)
    rows = [("+", key) for key in (a - b).elements()] + [("-", key) for key in (b - a).elements()]
    rows.sort(key=lambda row: -row[1][2])
    return [(f"{sign}{list(shape)} {dtype}", size) for sign, (shape, dtype, size) in rows[:SHOWN_DIFFERENCES]]


def measure(name: str, config: dict, seqs: tuple[int, ...], device: str, backward: bool = True) -> list[dict]:
    """One row per (kind, sequence length): real, census and priced bytes per token and the largest differences."""
    from speccat.census import run_census

    layer_types = getattr(resolved(config)[1], "layer_types", None)
    rows = []
    for seq in seqs:
        spec = run_census(config, name=name, seq_length=seq)
        first = first_layers(spec, layer_types)
        indices = sorted(set(first.values()))
        real, attention, peaks = real_run(config, indices[-1] + 1, indices, seq, device, backward)
        census = census_run(config, indices[-1] + 1, indices, seq)
        priced, refused = prices(spec, seq), night_refusal(spec)
        for (kind, layer_type), index in first.items():
            rows.append({
                "config": name, "kind": f"{kind} {layer_type}".strip(), "seq": seq, "attention": attention[index],
                "real": nbytes(real[index]) / seq, "census": nbytes(census[index]) / seq,
                "measured": sum(spec["measured"][kind]["bytes_per_token"].values()),
                "priced": priced[kind], "unpriced": refused, "differences": differences(real[index], census[index]),
                # the backward peak beyond what the layer's backward began with: the GPU's (CUDA only) and the census's
                "backward_real": peaks[index] / seq if index in peaks else None,
                "backward_census": spec["measured"][kind]["backward_peak"] / seq,
            })  # fmt: skip
    return rows


def row_line(row: dict) -> str:
    ratio = row["priced"] / row["real"] if row["real"] else float("nan")
    diffs = "; ".join(f"{what} {size / row['seq']:,.1f} B/token" for what, size in row["differences"]) or "none"
    if row["unpriced"]:
        diffs = f"stored unpriced ({row['unpriced']}); {diffs}"
    backward = "-" if row["backward_real"] is None else f"{row['backward_real']:,.1f}"
    return (
        f"   {row['config'][:34]:34} {row['kind'][:30]:30} {row['seq']:>6} {row['attention'][:9]:>9} "
        f"{row['real']:>12,.1f} {row['priced']:>12,.1f} {ratio:>7.4f} {row['census']:>12,.1f} "
        f"{backward:>12} {row['backward_census']:>12,.1f}   {diffs}"
    )


def snapshot_configs(names: list[str]) -> list[tuple[str, dict]]:
    """(ORG/NAME, config) of the named config files or folders, else of every shipped config."""
    paths = [Path(n) for n in names] or sorted(p for p in SNAPSHOT.iterdir() if (p / "config.json").exists())
    out = []
    for path in paths:
        file = path / "config.json" if path.is_dir() else path
        out.append((file.parent.name.replace("__", "/", 1), json.loads(file.read_text())))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", action="append", default=[], help="a config.json or a folder holding one (default: the shipped snapshot)")
    parser.add_argument("--seq", type=int, action="append", help=f"sequence length (default {' and '.join(map(str, SEQS))})")
    parser.add_argument("--forward-only", action="store_true",
                        help="build the graph without running the backward: the same bytes kept, half the memory (the largest models at 16384)")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = parser.parse_args(argv or [])  # `python -m bench gpu` calls main() with no options
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"bench gpu: no CUDA device (torch {torch.__version__} sees none): nothing measured")
        return 0
    from speccat.census.spec import SpecError

    print("== bench_gpu: bytes per token kept for backward by one layer of each kind, a real run on "
          f"{args.device} (bf16, random weights) against the records' price and the census's run")  # fmt: skip
    print(f"   {'config':34} {'kind':30} {'seq':>6} {'attention':>9} {'real':>12} {'priced':>12} {'p/real':>7} {'census':>12} {'bwd real':>12} {'bwd census':>12}   largest differences (+ real only, - census only)")
    off = unpriced = 0
    for (name, config), seq in ((c, seq) for c in snapshot_configs(args.config) for seq in args.seq or SEQS):
        try:
            rows = measure(name, config, (seq,), args.device, backward=not args.forward_only)
        except SpecError as err:
            print(f"   {name}: refused, not measured: {err.reason}")
            continue
        except Exception as err:  # a model or length this harness cannot run (out of memory): said, and the check goes on
            print(f"   {name} at {seq}: not measured: {type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}")
            if args.device == "cuda":
                torch.cuda.empty_cache()
            continue
        for row in rows:
            print(row_line(row))
            if row["unpriced"]:
                unpriced += 1
            else:
                off += abs(row["priced"] / row["real"] - 1) > 0.03 if row["real"] else 1
        if args.device == "cuda":
            torch.cuda.empty_cache()
    print(f"   {off} (kind, length) rows priced more than 3% off what the GPU kept; {unpriced} rows of specs the night stores unpriced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
