"""Measured across settings: each kind measured at the points census/across.yaml names, besides
the census's own setting (docs/census.md, "Measured across settings").

- a second sequence length (per-token, s² and constant terms separate);
- a context-parallel rank: the layer run at s/cp tokens;
- a tensor-parallel rank: the model rebuilt with its heads and widths divided by t;
- selective recompute of each switch, and of all of them, through torch's selective-checkpoint
  API (census/measure/recompute.py), every switch set counted from one forward.

Each point is one mapping of the spec's `measured_at` list: its name, the setting it stands
for (seq_length, tp, cp, sequence_parallel, recompute), and per kind the bytes per op per token
of the setting's sequence (a cp rank's bytes over the whole sequence's tokens), so that the
records' price at that setting is directly comparable. A kind a point cannot measure (a rank
transformers cannot build, a head width the rank does not keep) is left out of that point.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from speccat.catalogue.datafile import read_yaml
from speccat.catalogue.shared import switch_drops, switches
from speccat.census.build.model import build
from speccat.census.describe.feed_forward_facts import EXPERTS_IMPL
from speccat.census.describe.layer_view import LayerView
from speccat.census.describe.probe_checks import check_appended_keys
from speccat.census.measure.layer_probe import LayerProbe
from speccat.census.measure.probe import probe_layers
from speccat.census.measure.recompute import probe_recomputed
from speccat.census.structure.shapes import Shape, classify, uses_experts_interface

log = logging.getLogger(__name__)

POINTS: Mapping[str, Any] = read_yaml(Path(__file__).with_name("across.yaml"))

Measure = Callable[[dict[int, LayerProbe], int], dict[str, dict[str, float]]]


def _point(name: str, seq_length: int, per_kind: dict, *, tp: int = 1, cp: int = 1, recompute: tuple[str, ...] = ()) -> dict:
    return {
        "point": name,
        "seq_length": seq_length,
        "tp": tp,
        "cp": cp,
        "sequence_parallel": False,
        "recompute": list(recompute),
        "bytes_per_token": per_kind,
    }


def encoder_tokens(seq_length: int) -> list[int]:
    """The encoder-token counts a cross-attention kind is measured at: across.yaml's factors of
    the census's sequence length, each at least one token, distinct."""
    return list(dict.fromkeys(max(1, int(seq_length * f)) for f in POINTS["encoder_token_factors"]))


def encoder_points(
    built, shapes: list[Shape], kind_of: Mapping[int, str], seq_length: int, probed: dict[int, LayerProbe], hidden: int, across: bool = False
) -> list[dict]:
    """The points of the cross-attention kinds `shapes` given encoder states: one per encoder-token
    count (the first already probed, `probed`), at the census's sequence length, bytes per token
    of the decoder's sequence (what scales with the encoder's tokens included); with `across`,
    also the switch sets of across.yaml recomputed at the first count."""
    measure = _per_kind(built, shapes, kind_of, hidden)
    indices = [shape.first for shape in shapes]
    points = []
    counts = encoder_tokens(seq_length)
    for i, tokens in enumerate(counts):
        probes = probed if i == 0 else probe_layers(built, indices, seq_length, encoder_tokens=tokens)
        points.append(_point(f"encoder {tokens}", seq_length, measure(probes, seq_length)) | {"encoder_tokens": counts[i]})
    if across:
        tokens = counts[0]
        by_policy = _recomputed(built, indices, seq_length, probed, measure, encoder_tokens=tokens)
        for name, chosen, ops in _switch_sets(probed):
            point = _point(f"encoder {tokens} recompute {name}", seq_length, by_policy[ops], recompute=chosen)
            points.append(point | {"encoder_tokens": tokens})
    return points


def _recomputed(built, indices: list[int], seq_length: int, plain: dict[int, LayerProbe], measure: Measure, encoder_tokens: int = 0) -> dict[frozenset[str], dict]:
    """Each switch set's ops -> the layers' bytes per kind with them recomputed. Switch sets
    whose ops keep nothing in these layers give the same policy; all policies from one forward."""
    policies = list(dict.fromkeys(ops for _, _, ops in _switch_sets(plain)))
    recomputed = probe_recomputed(built, indices, seq_length, plain, policies, encoder_tokens=encoder_tokens)
    return {ops: measure(probes, seq_length) for ops, probes in zip(policies, recomputed)}


def _switch_sets(plain: dict[int, LayerProbe]) -> list[tuple[str, tuple[str, ...], frozenset[str]]]:
    """(point name suffix, switches, the ops and parts they drop that the layers' plain probes
    booked) for each switch set across.yaml recomputes: each switch alone, then all of them."""
    names, ops_of = switches(), switch_drops()
    sets = [(s,) for s in names] if POINTS["recompute_each_switch"] else []
    if POINTS["recompute_all"]:
        sets.append(names)
    booked = set().union(*(ops for probe in plain.values() for ops in probe.kept_by_call.values()))
    return [
        ("all" if len(chosen) > 1 else chosen[0], chosen, frozenset(op for s in chosen for op in ops_of.get(s, ())) & booked)
        for chosen in sets
    ]


def _per_kind(built, shapes: list[Shape], kind_of: Mapping[int, str], hidden: int) -> Measure:
    """Bytes per op per token of `tokens`, per kind, from probes run at the probe's own length."""

    def measure(probes: dict[int, LayerProbe], run_length: int, tokens: int | None = None) -> dict[str, dict[str, float]]:
        out = {}
        for shape in shapes:
            probe = probes.get(shape.first)
            if probe is None:
                continue
            view = LayerView(shape.first, built.layers[shape.first], probe, shape, hidden)
            per_run_token = view.bytes_per_token(run_length)
            scale = run_length / (tokens or run_length)
            out[kind_of[shape.first]] = {op: value * scale for op, value in per_run_token.items()}
        return out

    return measure


def _fields(config: Any, group: str) -> list[str]:
    """census/across.yaml's fields of `group`, each of the config's own fields once: two names the
    config's attribute_map points at one field (deepseek_v4's intermediate_size, an alias of its
    moe_intermediate_size) are one field, divided once, not once per name."""
    aliases = getattr(config, "attribute_map", None) or {}
    return list(dict.fromkeys(aliases.get(name, name) for name in POINTS[group]))


def _rank_configs(top: Any, text: Any, t: int) -> tuple[Any, Any] | None:
    """The configs of one of t tensor-parallel ranks, or None when t does not divide them."""
    rank_top = copy.deepcopy(top)
    rank_text = rank_top if text is top else rank_top.get_text_config()
    heads = getattr(rank_text, "num_attention_heads", None)
    hidden = getattr(rank_text, "hidden_size", None)
    if not isinstance(heads, int) or not isinstance(hidden, int):
        return None
    if not isinstance(getattr(rank_text, "head_dim", None), int):
        rank_text.head_dim = hidden // heads
    kv_heads = {name: getattr(rank_text, name, None) for name in _fields(rank_text, "kv_heads_fields")}
    for name in _fields(rank_text, "tensor_parallel_fields"):
        value = getattr(rank_text, name, None)
        sizes = value if isinstance(value, list) else [value]  # one per layer (gemma3n's intermediate_size), each divided
        if sizes and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes):
            if any(v % t for v in sizes):
                return None
            setattr(rank_text, name, [v // t for v in sizes] if isinstance(value, list) else value // t)
    for name, kv in kv_heads.items():
        if isinstance(kv, int) and not isinstance(kv, bool) and kv > 0:
            if kv % t and t % kv:
                return None
            setattr(rank_text, name, max(kv // t, 1))
    return rank_top, rank_text


def _same_heads(plain: LayerProbe, rank: LayerProbe) -> bool:
    """The rank's kernels keep the model's head widths (a model may derive them from the heads)."""
    def widths(probe: LayerProbe) -> list[tuple]:
        return [(k.kind, k["q"][-1:], k["k"][-1:], k["v"][-1:]) for k in probe.kernels if k.kind == "attention"]

    return len(plain.kernels) == len(rank.kernels) and widths(plain) == widths(rank)


def _rank_probes(top: Any, text: Any, t: int, shapes: list[Shape], seq_length: int, plain: dict[int, LayerProbe]) -> tuple[Any, dict[int, LayerProbe]] | None:
    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # a rank whose shapes do not fit fails in fake tensors, which log it at length
    try:
        configs = _rank_configs(top, text, t)  # per-layer configs refuse a global head count
        if configs is None:
            return None
        built = build(*configs)
        rank_of = dict(classify(built.layers))
        # the rank's layers must be built alike where the model's are: each kind's layers one
        # shape on the rank too (a kind may be part of a shape split by per-layer config values)
        if any(len({id(rank_of[i]) for i in s.layers}) != 1 for s in shapes) or len({id(rank_of[s.first]) for s in shapes}) != len({s.signature for s in shapes}):
            return None
        if uses_experts_interface(built.layers) and built.decoder.config._experts_implementation != EXPERTS_IMPL:
            built.model.set_experts_implementation(EXPERTS_IMPL)
        probes = probe_layers(built, [s.first for s in shapes], seq_length, backward=False)
    except MemoryError:  # the census's budget, not the rank's shape: the whole census is too large
        raise
    except Exception as err:  # a rank transformers cannot build or run is not measured
        log.info("tp %d rank not measured: %s: %s", t, type(err).__name__, err)
        return None
    finally:
        quiet.setLevel(level)
    return built, {i: p for i, p in probes.items() if _same_heads(plain[i], p)}


def measure_across(top: Any, text: Any, built, shapes: list[Shape], kind_of: Mapping[int, str], seq_length: int, plain: dict[int, LayerProbe], hidden: int) -> list[dict]:
    """The spec's `measured_at`: every point of across.yaml that the model can be measured at."""
    indices = [shape.first for shape in shapes]
    measure = _per_kind(built, shapes, kind_of, hidden)
    points, by_length = [], {}

    def at_length(length: int) -> dict[int, LayerProbe]:
        if length not in by_length:
            by_length[length] = probe_layers(built, indices, length, backward=False)
            for shape in shapes:
                if shape.first in by_length[length] and shape.first in plain:
                    layer = built.layers[shape.first]
                    check_appended_keys(
                        LayerView(shape.first, layer, plain[shape.first], shape, hidden), LayerView(shape.first, layer, by_length[length][shape.first], shape, hidden), length
                    )
        return by_length[length]

    for factor in POINTS["sequence_factors"]:
        length = int(seq_length * factor)
        points.append(_point(f"seq {length}", length, measure(at_length(length), length)))
    for cp in POINTS["context_parallel"]:
        if seq_length % cp == 0:
            points.append(_point(f"cp {cp}", seq_length, measure(at_length(seq_length // cp), seq_length // cp, seq_length), cp=cp))
    for t in POINTS["tensor_parallel"]:
        rank = _rank_probes(top, text, t, shapes, seq_length, plain)
        if rank is not None and rank[1]:
            rank_measure = _per_kind(rank[0], shapes, kind_of, hidden)
            points.append(_point(f"tp {t}", seq_length, rank_measure(rank[1], seq_length), tp=t))
    by_policy = _recomputed(built, indices, seq_length, plain, measure)
    for name, chosen, ops in _switch_sets(plain):
        points.append(_point(f"recompute {name}", seq_length, by_policy[ops], recompute=chosen))
    return points
