"""Whole-rank memory and what fits (docs/planning.md): for a layout (dp, tp, pp, ep, cp, ZeRO
stage, virtual stages), a sequence length and a micro-batch, the bytes each pipeline stage's
rank holds under each switch set, and which (layout, switch set) pairs fit a memory budget,
ranked by estimated recompute time.

A stage's rank holds its model states (states.py), its layers' activations (the records'
prices) and its ends' (head.py: the embedding on the first stage, the final norm and logits on
the last), each for the micro-batches in flight: in 1F1B, stage i of pp holds pp − i; with v
virtual stages each holds (pp − i)(1 + (pp − 1)/(pp·v)) (Korthikanti et al. 2022, section
4.2.3, for the first stage). The rank that must fit is the fullest stage's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import product

import numpy as np

from speccat.catalogue.records.cost import Accelerator, Costs, op_costs
from speccat.catalogue.records.head import Head, price_head
from speccat.catalogue.records.layouts import LayoutError, infeasible
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.pins import no_layout
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.settings import Grid
from speccat.catalogue.records.states import Layout, States, layout_shares, stage_kinds, stage_params, stage_states

FULL = -1  # full recompute, beside the masks
BYTE_FIELDS = frozenset({"activations", "ends", "weight", "grad", "optimizer", "total"})


def in_flight(pp: int, vpp: int, stage: int) -> float:
    """Micro-batches whose activations stage `stage` holds at its peak."""
    factor = 1.0 + (pp - 1) / (pp * vpp) if vpp > 1 else 1.0
    return (pp - stage) * factor


@dataclass(frozen=True)
class Fit:
    """One (layout, switch set): the fullest stage's bytes by part, and the recompute it costs."""

    layout: Layout
    micro_batch: int
    mask: int  # FULL for full recompute
    switch_set: str
    stage: int  # the fullest stage
    in_flight: float
    activations: float  # bytes: the stage's layers × in-flight micro-batches
    ends: float  # bytes: embedding / final norm and logits × in-flight micro-batches
    weight: float
    grad: float
    optimizer: float
    total: float
    recompute_flops: float  # per micro-batch, the first stage's layers
    recompute_moved: float
    recompute_s: float  # estimated, per micro-batch, the first stage's layers
    overhead: float  # recompute_s over the same layers' forward + backward time (ratio)
    recompute_s_per_seq: float  # recompute_s over the sequences the dp pipelines take per micro-batch (dp · micro_batch)

    def as_dict(self) -> dict:
        """The row as `fit --json` prints it: byte figures as whole bytes, rounded up (a rank
        holds no half byte; a ZeRO or tp share of an odd count is priced as a fraction)."""
        out = {f: getattr(self.layout, f) for f in ("dp", "tp", "pp", "ep", "cp", "zero", "vpp")}
        out.update({k: math.ceil(v) if k in BYTE_FIELDS else v for k, v in self.__dict__.items() if k != "layout"})
        return out


def layouts(gpus: int, spec: Mapping, fixed: Mapping[str, int | None], zeros: Iterable[int], max_tp: int) -> list[Layout]:
    """Every layout of `gpus` ranks: tp dividing the heads and tp and cp at most `max_tp` (a node), pp at most the layers, ep dividing
    both the routed experts and dp·cp (tp divides every kind's heads, where kinds state their own); a field given in `fixed` is held at its value."""
    heads = [int(spec["num_attention_heads"]), *(int(d["num_attention_heads"]) for d in spec.get("attention_dims", {}).values())]
    n_layers = sum(g["count"] for g in spec["layers"])
    experts = int(spec.get("num_experts", 1) or 1)

    def choices(name: str, candidates: Iterable[int]) -> list[int]:
        """The candidates, or the held value alone where it is one of them (else none)."""
        candidates = list(candidates)
        return candidates if fixed.get(name) is None else [v for v in candidates if v == fixed[name]]

    divisors = [d for d in range(1, gpus + 1) if gpus % d == 0]
    # A held tp is not checked against the heads here: layouts.yaml's rules refuse it, saying why.
    tps = [d for d in divisors if d <= max_tp and (fixed.get("tp") is not None or all(n % d == 0 for n in heads))]
    out = []
    for tp, pp, cp in product(choices("tp", tps), choices("pp", [d for d in divisors if d <= n_layers]), choices("cp", [d for d in divisors if d <= max_tp])):
        if gpus % (tp * pp * cp):
            continue
        dp = gpus // (tp * pp * cp)
        if fixed.get("dp") is not None and fixed["dp"] != dp:
            continue
        eps = [d for d in range(1, dp * cp + 1) if (dp * cp) % d == 0 and experts % d == 0] if experts > 1 else [1]
        for ep, zero in product(choices("ep", eps), zeros):
            if zero and dp * cp == 1:
                continue  # no data-parallel ranks to shard over: every ZeRO stage is stage 0
            out.append(Layout(dp=dp, tp=tp, pp=pp, ep=ep, cp=cp, zero=zero, vpp=fixed.get("vpp") or 1))
    return out


def _pareto(bytes_: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Points no other point beats on both (<= both, < one); of equal points the first.
    Sorted by bytes, then seconds, then position, a point is on the frontier when its seconds
    are below every earlier point's."""
    order = np.lexsort((np.arange(len(bytes_)), seconds, bytes_))
    ordered = seconds[order]
    before = np.concatenate([[np.inf], np.minimum.accumulate(ordered)[:-1]])
    out = np.zeros(len(bytes_), dtype=bool)
    out[order] = (ordered < before) & np.isfinite(bytes_[order])
    return out


def fits(
    spec: Mapping, records: Records, grid: Grid, costs: Costs, states: States, head: Head,
    accelerator: Accelerator, *, gpus: int, seq: int, budget: float, micro_batch: int = 1,
    fixed: Mapping[str, int | None] | None = None, zeros: Iterable[int] = (0, 1, 2, 3), recipe: str | None = None,
    setting: Mapping | None = None,
) -> list[Fit]:  # fmt: skip
    """Every (layout, switch set) whose fullest stage fits `budget` bytes (layouts that
    layouts.yaml refuses at the setting left out; LayoutError "infeasible" when the held fields
    leave no layout, or only refused ones), ranked by estimated
    recompute seconds per sequence (the first stage's per micro-batch, over dp · micro_batch:
    the dp pipelines run side by side), then total bytes. `setting` holds the other setting
    fields (the stack, flash attention, the dtype, ...) over the grid's defaults. Per layout only the switch sets no other beats on both
    bytes and seconds are listed (one of each equal pair: the lowest mask, full recompute last)."""
    fixed = dict(fixed or {})
    zeros = tuple(zeros)
    candidates = layouts(gpus, spec, fixed, zeros, accelerator.node)
    if not candidates:  # the held fields cannot be: say which, not "nothing fits"
        raise LayoutError("infeasible", f"{spec.get('name', 'the model')}: {no_layout(spec, gpus, fixed, zeros, accelerator.node)}")
    keys = sorted({(lay.tp, lay.cp) for lay in candidates})
    base = dict(setting or {})  # the stack and any other setting field (`--set`), under what the layout decides
    settings = [grid.setting({**base, "seq_length": seq, "micro_batch": micro_batch, "tp": tp, "cp": cp, "in_flight": 1}) for tp, cp in keys]
    refusals = infeasible(spec, records, grid.with_settings(settings))
    refused = {row["setting_id"] for row in refusals}
    keys = [key for key, setting in zip(keys, settings) if setting["setting_id"] not in refused]
    settings = [setting for setting in settings if setting["setting_id"] not in refused]
    candidates = [lay for lay in candidates if (lay.tp, lay.cp) in set(keys)]
    if not candidates:  # every (tp, cp) left is one layouts.yaml refuses: its first rule says why
        first = refusals[0]
        raise LayoutError("infeasible", f"{spec.get('name', 'the model')}: kind {first['kind']!r} cannot run at seq {seq}: {first['message']} ({first['rule']})")
    sub = grid.with_settings(settings)
    prices = price_layers(spec, records, sub)
    oc = op_costs(spec, records, sub, costs)
    flops, moved = oc.masks(records)
    fwd_flops, fwd_moved = oc.forward()
    seconds = oc.seconds(accelerator, records)  # [kind, setting, mask]
    fwd_seconds = oc.seconds(accelerator).sum(axis=2)  # [kind, setting]
    # points: masks, then full recompute
    kept = np.concatenate([prices.total, prices.full[..., None]], axis=2)
    p_flops = np.concatenate([flops, fwd_flops[..., None]], axis=2)
    p_moved = np.concatenate([moved, fwd_moved[..., None]], axis=2)
    p_seconds = np.concatenate([seconds, fwd_seconds[..., None]], axis=2)
    kind_index = {k: i for i, k in enumerate(prices.kinds)}
    ends = [price_head(spec, records, s, grid.dtype_bytes, head) for s in settings]
    n = records.n_masks
    out: list[Fit] = []
    stage_weights: dict[int, list[np.ndarray]] = {}  # pp -> layers per kind on each stage
    stage_groups: dict[int, list[dict[str, float]]] = {}  # pp -> parameters per group on each stage
    activations: dict[tuple[int, int, int], tuple[np.ndarray, list[float], float, np.ndarray, float]] = {}
    stage_counts: dict[int, np.ndarray] = {}  # pp -> [stage, group] parameters
    group_names = list(stage_params(spec, 1, 0))  # every stage's parameter groups, in one order
    set_names: dict[int, str] = {}
    column = {key: j for j, key in enumerate(keys)}
    # First what the layouts share: per pp the stages' layers and parameters, per (tp, cp, pp,
    # vpp) the stages' activations.
    for lay in candidates:
        j = column[(lay.tp, lay.cp)]
        if lay.pp not in stage_weights:
            weights = []
            for counts in stage_kinds(spec, lay.pp):
                w = np.zeros(len(prices.kinds))
                for kind, c in counts.items():
                    w[kind_index[kind]] = c
                weights.append(w)
            stage_weights[lay.pp] = weights
            stage_groups[lay.pp] = [stage_params(spec, lay.pp, i) for i in range(lay.pp)]
            stage_counts[lay.pp] = np.array([[g[name] for name in group_names] for g in stage_groups[lay.pp]], dtype=float)
        key = (j, lay.pp, lay.vpp)
        if key not in activations:  # what dp, ep and the ZeRO stage do not change
            flights = [in_flight(lay.pp, lay.vpp, i) for i in range(lay.pp)]
            act = np.stack([(w @ kept[:, j, :]) * f for w, f in zip(stage_weights[lay.pp], flights)])  # [stage, point]
            end = [((ends[j]["embedding"] if i == 0 else 0.0) + (ends[j]["final_norm"] + ends[j]["logits"] if i == lay.pp - 1 else 0.0)) * flights[i]
                   for i in range(lay.pp)]  # fmt: skip
            first = stage_weights[lay.pp][0]
            activations[key] = (act + np.asarray(end)[:, None], end, costs.step_factor * float(first @ fwd_seconds[:, j]), first @ p_seconds[:, j, :], 0.0)
    # Each layout's states per stage [stage, (weight, grad, optimizer, total)], all layouts of a pp at once.
    shares = layout_shares(states, candidates, group_names, recipe)  # [layout, group, state]
    layout_states: list[np.ndarray] = [np.empty(0)] * len(candidates)
    by_pp: dict[int, list[int]] = {}
    by_key: dict[tuple[int, int, int], list[int]] = {}
    for idx, lay in enumerate(candidates):
        by_pp.setdefault(lay.pp, []).append(idx)
        by_key.setdefault((column[(lay.tp, lay.cp)], lay.pp, lay.vpp), []).append(idx)
    for pp, idxs in by_pp.items():
        for idx, st in zip(idxs, stage_states(stage_counts[pp], shares[idxs])):
            layout_states[idx] = st
    # Which layouts fit under any switch set: the fullest stage's bytes, all layouts of an activation key at once.
    fits_any = np.zeros(len(candidates), dtype=bool)
    for key, idxs in by_key.items():
        state_totals = np.stack([layout_states[i][:, 3] for i in idxs])  # [layout, stage]
        peaks = (activations[key][0][None, :, :] + state_totals[:, :, None]).max(axis=1)  # [layout, point]
        fits_any[idxs] = (peaks <= budget).any(axis=1)
    for idx in np.flatnonzero(fits_any):
        lay = candidates[idx]
        j = column[(lay.tp, lay.cp)]
        held, end, step_s, rec_s, _ = activations[(j, lay.pp, lay.vpp)]
        st = layout_states[idx]
        totals = held + st[:, 3:4]  # [stage, point]
        fullest = totals.argmax(axis=0)
        peak = totals[fullest, np.arange(totals.shape[1])]
        fits_at = peak <= budget
        for p in np.flatnonzero(_pareto(np.where(fits_at, peak, np.inf), rec_s) & fits_at):
            i = int(fullest[p])
            first = stage_weights[lay.pp][0]
            mask = FULL if p == n else int(p)
            flight = in_flight(lay.pp, lay.vpp, i)
            out.append(Fit(
                lay, micro_batch, mask, set_names.get(mask) or set_names.setdefault(mask, "full" if mask == FULL else _name(records, mask)), i, float(flight),
                float(held[i, p] - end[i]), float(end[i]), float(st[i, 0]), float(st[i, 1]), float(st[i, 2]), float(peak[p]),
                float(first @ p_flops[:, j, p]), float(first @ p_moved[:, j, p]), float(rec_s[p]), float(rec_s[p] / step_s),
                float(rec_s[p] / (lay.dp * micro_batch)),
            ))  # fmt: skip
    out.sort(key=lambda f: (f.recompute_s_per_seq, f.total, f.mask))
    return out


def _name(records: Records, mask: int) -> str:
    switches = records.switches_of(mask)
    if not switches:
        return "none"
    if len(switches) == len(records.switches):
        return "all"
    return ",".join(switches)
