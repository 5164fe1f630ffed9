"""Routing skew in `speccat fit --moe-overload F`: the busiest expert-parallel rank receives F
times an even share of the routed tokens (Megatron-LM's overload factor), so what its routed
experts keep per token slot is F times the even load's; the router and shared experts, which see
each token once, are unchanged. Worked on Qwen3-30B-A3B (48 layers, 8 of 128 experts a token,
expert width 768, hidden 2048) on the megatron stack at seq 4096, tp 1, cp 1, ep 8, dp 8.

One routed token slot on the megatron stack (catalogue/records/records.yaml, `routed`): the
down projection's input (768 bf16), the fused activation's input and the gate-up output
(2 x 768 bf16), the gathered input (2048 bf16), the routing weight (bf16) and three int64
sort/gather indices: 768*2 + 2*768*2 + 2048*2 + 2 + 3*8 = 8730 bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speccat.flows.cli import main

SNAPSHOT = Path(__file__).parents[2] / "flows" / "snapshot"
QWEN_MOE = SNAPSHOT / "Qwen__Qwen3-30B-A3B"
S, LAYERS, CHOSEN = 4096, 48, 8
SLOT = 768 * 2 + 2 * 768 * 2 + 2048 * 2 + 2 + 3 * 8


def none_row(capsys, *extra) -> dict:
    argv = ["fit", str(QWEN_MOE), "--stack", "megatron", "--seq", str(S), "--gpus", "8", "--tp", "1", "--cp", "1", "--pp", "1",
            "--ep", "8", "--zero", "1", "--gpu-mem", "1000GiB", "--json", "--top", "0", *extra]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    return out, next(r for r in out["rows"] if r["switch_set"] == "none")


def test_the_routed_experts_keep_f_times_the_even_load(capsys):
    assert SLOT == 8730
    even_out, even = none_row(capsys)
    assert even_out["setting"]["dropless_tok_factor"] == 1
    for factor in (1.25, 1.5, 2):
        out, row = none_row(capsys, "--moe-overload", str(factor))
        assert out["setting"]["dropless_tok_factor"] == factor
        more = (factor - 1) * LAYERS * S * CHOSEN * SLOT
        assert row["activations"] - even["activations"] == pytest.approx(more, rel=1e-12), factor
        assert (row["ends"], row["weight"], row["grad"], row["optimizer"]) == (even["ends"], even["weight"], even["grad"], even["optimizer"])


@pytest.mark.parametrize(
    "config, extra, said",
    [
        (QWEN_MOE, ("--moe-overload", "0.5"), "--moe-overload 0.5: the busiest rank's share of an even load, 1 or more"),
        (QWEN_MOE, ("--moe-overload", "2", "--set", "dropless_tok_factor=2"),
         "--moe-overload sets dropless_tok_factor: leave --set dropless_tok_factor out"),
        (SNAPSHOT / "Qwen__Qwen3-0.6B", ("--moe-overload", "2"), "--moe-overload: Qwen/Qwen3-0.6B has no routed experts"),
    ],
)
def test_a_bad_overload_is_refused(capsys, config, extra, said):
    assert main(["fit", str(config), "--seq", "4096", "--gpus", "8", *extra]) == 2
    assert capsys.readouterr().err == f"speccat: bad_argument: {said}\n"
