"""The parallel layouts `speccat fit` tries on a number of GPUs: every way to split them into
data, tensor, pipeline, context and expert parallel ranks under each ZeRO stage, with the
fields the user held kept at their values. Which of them a model can run, and what a rank of
each holds, is the planner's SQL (sql/macros/rank_stages.sql) and layouts.yaml's rules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import product


@dataclass(frozen=True)
class Layout:
    """How the ranks are arranged: data, tensor, pipeline (with `vpp` virtual stages each),
    expert and context parallel sizes, and the ZeRO stage."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    cp: int = 1
    zero: int = 0
    vpp: int = 1


def layouts(gpus: int, spec: Mapping, fixed: Mapping[str, int | None], zeros: Iterable[int], max_tp: int) -> list[Layout]:
    """Every layout of `gpus` ranks: tp dividing the heads and tp and cp at most `max_tp` (a node), pp at most the layers, ep dividing
    both the routed experts and dp·cp (tp divides every kind's heads, where kinds state their own); a field given in `fixed` is held at its value.
    In `arrangements`' order, which numbers them."""
    heads = [int(spec["num_attention_heads"]), *(int(d["num_attention_heads"]) for d in spec.get("attention_dims", {}).values())]
    n_layers = sum(g["count"] for g in spec["layers"])
    experts = int(spec.get("num_experts", 1) or 1)
    # A held tp is not checked against the heads here: layouts.yaml's rules refuse it, saying why.
    return [
        lay for lay in arrangements(gpus, zeros, max_tp, fixed.get("vpp"))
        if all(fixed.get(f) is None or getattr(lay, f) == fixed[f] for f in ("dp", "tp", "pp", "cp", "ep"))
        and (fixed.get("tp") is not None or all(n % lay.tp == 0 for n in heads))
        and lay.pp <= n_layers and experts % lay.ep == 0
    ]  # fmt: skip


def arrangements(gpus: int, zeros: Iterable[int], max_tp: int, vpp: int | None = None) -> list[Layout]:
    """Every way to arrange `gpus` ranks, whatever the model: tp and cp at most `max_tp`, ep dividing dp·cp, each ZeRO stage
    of `zeros` where dp·cp > 1 (else stage 0 alone, as there is nothing to shard over). In order: tp, pp, cp, then ep, then
    the ZeRO stage, each ascending."""
    zeros = tuple(zeros)
    divisors = [d for d in range(1, gpus + 1) if gpus % d == 0]
    out = []
    for tp, pp, cp in product([d for d in divisors if d <= max_tp], divisors, [d for d in divisors if d <= max_tp]):
        if gpus % (tp * pp * cp):
            continue
        dp = gpus // (tp * pp * cp)
        for ep, zero in product([d for d in divisors if (dp * cp) % d == 0], zeros):
            if zero and dp * cp == 1:
                continue  # no data-parallel ranks to shard over: every ZeRO stage is stage 0
            out.append(Layout(dp=dp, tp=tp, pp=pp, ep=ep, cp=cp, zero=zero, vpp=vpp or 1))
    return out


def leading(gpus: int, max_tp: int, highest_zero: int) -> list[Layout]:
    """Of `arrangements`, those that can rank first among the (layout, switch set) pairs `speccat fit` lists (the macro
    fitting_sets orders by recompute time per sequence, then the bytes the rank holds, then layout number): of layouts
    that differ only in ep and ZeRO stage, ep 1 at the highest stage. The others recompute the same and hold no fewer bytes:
    a higher ZeRO stage shards more states over the data group, and at the highest stage a routed expert's states are
    split over ep x etp ranks and its ZeRO shards over the dp·cp·tp/(ep·etp) ranks of the expert data group, dp·cp·tp
    ways whatever ep is, where ep 1 is numbered first. The table fits_on tries these for every model at once."""
    return [lay for lay in arrangements(gpus, (0, highest_zero), max_tp) if lay.ep == 1 and (lay.zero == highest_zero or lay.dp * lay.cp == 1)]
