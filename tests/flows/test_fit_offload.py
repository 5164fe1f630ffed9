"""Activation offload in `speccat fit --offload-layers N` (sql/macros/rank_stages.sql): the
activations of each rank's first N layers live in host memory. Llama-3.1-70B (80 layers) at tp 8,
pp 8 on 64 GPUs, seq 8192: each stage holds 10 layers of one kind, stage i with 8 - i
micro-batches in flight (1F1B). With 4 layers offloaded, a stage's activations on the GPU fall
by 4 layers x its micro-batches in flight, host memory holds the same, and each micro-batch's 4
layers cross the host link out and back: 2 x 4 layers / 64 GB/s, H100-SXM's PCIe Gen5 x16 in one
direction (its datasheet's 128 GB/s both ways). An offloaded layer's saves come back to the GPU
for its backward, with the saves its switch set recomputes remade: the stage's backward then
holds one layer's saves with nothing recomputed at once, which the total holds instead of the
remade saves alone.

With `--offload-layers auto` offload is the third action on fit's frontier beside keeping and
recomputing: every count from none to a stage's layers is tried with every switch set, and the
(set, count) pairs listed are those no other beats on the bytes, the recompute time and the
copy time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speccat.flows.cli import main

CONFIG = Path(__file__).parents[2] / "flows" / "snapshot" / "meta-llama__Llama-3.1-70B-Instruct"
LAYERS_PER_STAGE, OFFLOADED, HOST_LINK = 10, 4, 64e9


def rows(capsys, *extra) -> dict[tuple, dict]:
    """fit's rows (dp 1, ZeRO 0), by switch set."""
    argv = ["fit", str(CONFIG), "--seq", "8192", "--gpus", "64", "--tp", "8", "--pp", "8", "--zero", "0", "--gpu-mem", "1000GiB",
            "--json", "--top", "0", *map(str, extra)]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    return out, {r["switch_set"]: r for r in out["rows"]}


def test_four_layers_offloaded_on_llama_70b_at_tp8_pp8(capsys):
    plain_out, plain = rows(capsys)
    out, offloaded = rows(capsys, "--offload-layers", OFFLOADED)
    assert plain_out["offload_layers"] == 0 and out["offload_layers"] == OFFLOADED
    assert set(offloaded) == set(plain) and {"none", "full"} <= set(plain)
    none_layer = plain["none"]["activations"] / (LAYERS_PER_STAGE * plain["none"]["in_flight"])  # one layer, nothing recomputed
    for name, before in plain.items():
        after = offloaded[name]
        assert before["host"] == 0 and before["offload_s"] == 0
        # one layer of the set on the stage shown, from the plain run: its activations over 10 layers x in flight
        layer = before["activations"] / (LAYERS_PER_STAGE * before["in_flight"])
        flight = after["in_flight"]
        assert after["in_flight"] == 8 - after["stage"]
        assert after["host"] == pytest.approx(OFFLOADED * layer * flight, rel=1e-9, abs=1), name
        assert after["activations"] == pytest.approx((LAYERS_PER_STAGE - OFFLOADED) * layer * flight, rel=1e-9, abs=1), name
        assert after["offload_s"] == pytest.approx(2 * OFFLOADED * layer / HOST_LINK, rel=1e-9), name
        assert before["remade"] == pytest.approx(none_layer - (0 if name == "full" else layer), abs=1), name
        assert after["remade"] == pytest.approx(none_layer, abs=1), name  # an offloaded layer's saves, back whole
        if after["stage"] == before["stage"]:  # the GPU holds less by what the host holds, more by one layer's saves back
            back = max(after["loss_working"], after["backward"]) - max(before["loss_working"], before["backward"])
            assert before["total"] - after["total"] == pytest.approx(after["host"] - back, abs=2), name
        for field in ("ends", "loss_working", "weight", "grad", "optimizer", "recompute_s"):
            assert after[field] == before[field], (name, field)
    # the first stage keeps 8 micro-batches: 4 layers x 8 of the no-recompute set, 0.38 GiB a layer
    none = offloaded["none"]
    assert none["stage"] == 0 and 12 < none["host"] / 2**30 < 12.3


def test_more_layers_than_a_stage_holds_offloads_them_all(capsys):
    _, plain = rows(capsys)
    _, every = rows(capsys, "--offload-layers", 100)
    none, layer = every["none"], plain["none"]["activations"] / (LAYERS_PER_STAGE * plain["none"]["in_flight"])
    assert none["activations"] == 0 and none["host"] == pytest.approx(LAYERS_PER_STAGE * layer * none["in_flight"], rel=1e-9)
    # no activations left on the ranks: the last stage, holding the head and the loss, is now the fullest
    assert none["stage"] == 7 and none["loss_working"] > 0


def test_offload_weighed_on_the_frontier(capsys):
    budget = ("--gpu-mem", "40GiB")  # after rows()'s own 1000GiB: the last one given counts
    searched = [r for r in rows(capsys, *budget, "--offload-layers", "auto")[0]["rows"] if r["dp"] == 1]
    plain = {r["switch_set"]: r for r in rows(capsys, *budget)[0]["rows"] if r["dp"] == 1}
    # nothing recomputed fits 40 GiB only with layers offloaded: the fewest that fit are 4
    assert "none" not in plain
    kept = [r for r in searched if r["switch_set"] == "none"]
    assert min(r["offload_layers"] for r in kept) == OFFLOADED and all(r["recompute_s"] == 0 for r in kept)
    # each listed pair is what --offload-layers N prices for it
    for n in {r["offload_layers"] for r in searched}:
        fixed = {r["switch_set"]: r for r in rows(capsys, *budget, "--offload-layers", n)[0]["rows"] if r["dp"] == 1} if n else plain
        for r in (r for r in searched if r["offload_layers"] == n and r["switch_set"] in fixed):
            assert {k: v for k, v in r.items() if k != "offload_layers"} == {k: v for k, v in fixed[r["switch_set"]].items() if k != "offload_layers"}
    # and no listed pair beats another on bytes, recompute and copy time
    key = [(r["total"], r["recompute_s"], r["offload_s"]) for r in searched]
    for i, a in enumerate(key):
        assert not any(j != i and all(x <= y for x, y in zip(b, a)) and b != a for j, b in enumerate(key)), searched[i]
