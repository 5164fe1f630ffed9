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
