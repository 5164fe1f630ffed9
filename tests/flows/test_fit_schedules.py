"""Pipeline schedules in `speccat fit --schedule` (catalogue/records/schedules.yaml), worked by
hand from each schedule's paper on the GPT-3-175B shape of tests/flows/test_fit_engine.py: the
megatron stack, fp16, flash attention off, 96 layers on 64 GPUs at tp 8, pp 8, seq 2048, no
recompute. One layer keeps Korthikanti et al. 2022's Table 2 bytes plus the LayerNorms' fp32
statistics; a rank's layers and ends are set by the schedule:

- 1F1B (Narayanan et al. 2021): stage i holds pp - i micro-batches; the first stage 12 layers x 8
  and the embedding's output x 8.
- ZB-H1 (Qi et al. 2024, section 2.1): the same peak as 1F1B.
- ZB-H2 (Qi et al. 2024, section 2.2): (2p - 1) micro-batches on the first worker: 15.
- ZB-V (Qi et al. 2024): the stack in 2p = 16 chunks of 6 layers, worker 0 holding chunks 0 and 15
  (12 layers, the embedding and the head), p = 8 micro-batches through both, the head's
  tensors for one (its forward and backward run back to back).
- DualPipe (DeepSeek-V3 report, table 2): rank 0 holds stages 0 and 7 (24 layers, twice the
  parameters, the embedding and the head) and PP + 1 = 9 micro-batches of one stage's
  activations: 4.5 of its two stages'.
"""

from __future__ import annotations

import json

import pytest

from speccat.catalogue.records.schedules import load_schedules
from speccat.flows.cli import main
from support.pricing_specs import GPT3_175B_SHAPE

S, H, A, T, P, L, V = 2048, 12288, 96, 8, 8, 96, 50432
LAYER = S * H * (34 / T + 5 * A * S / (H * T)) + 2 * 2 * 4 * S / T  # one layer, no recompute (test_fit_engine.py)
LAYER_PARAMS = (12 * H * H + 9 * H) / T + 4 * H  # per tp rank: projections and biases split, LayerNorms replicated
EMBEDDING = S * 8  # the int64 ids, per micro-batch (the embedding's output is the first layer's input, in its price)


@pytest.fixture(scope="module")
def gpt3(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt3-175b-shape")
    (folder / "config.json").write_text(json.dumps({**GPT3_175B_SHAPE, "num_hidden_layers": L}))
    return folder


def first_rank(capsys, gpt3, *extra) -> dict:
    """The no-recompute row of the fullest rank at dp 1, ZeRO 0."""
    argv = ["fit", str(gpt3), "--stack", "megatron", "--seq", str(S), "--tp", str(T), "--set", "flash_attention=false",
            "--set", "dtype=fp16", "--gpu-mem", "2000GiB", "--zero", "0", "--json", "--top", "0", *map(str, extra)]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    return out, next(r for r in out["rows"] if r["switch_set"] == "none" and r["dp"] == 1)


def test_each_schedule_on_the_gpt3_shape_by_hand(gpt3, capsys):
    # the pp 1 rank holds every layer and every end, one micro-batch: the final norm's and the
    # head's tensors are its ends less the embedding's; their weights, the final LayerNorm's
    # weight and bias (2h, replicated) and the vocabulary-parallel head (V h / t), 2 bytes each
    _, one = first_rank(capsys, gpt3, "--gpus", T, "--pp", 1)
    assert one["in_flight"] == 1 and one["stage"] == 0
    head_ends = one["ends"] - EMBEDDING
    head_weight = 2 * (2 * H + V * H / T)
    assert one["weight"] == pytest.approx(2 * (L * LAYER_PARAMS + V * H / T) + head_weight, rel=1e-9) and head_ends > 0
    stage_weight = 2 * (L // P * LAYER_PARAMS + V * H / T)  # 1F1B's first stage: 12 layers and the embedding

    expected = {  # schedule: (layers on the rank, micro-batches in flight, head's micro-batches or 0, weight bytes)
        "1f1b": (12, 8, 0, stage_weight),
        "zb-h1": (12, 8, 0, stage_weight),
        "zb-h2": (12, 15, 0, stage_weight),
        "zb-v": (12, 8, 1, stage_weight + head_weight),
        "dualpipe": (24, 4.5, 1, stage_weight + 2 * 12 * LAYER_PARAMS + head_weight),
    }
    for name, (layers, flight, head, weight) in expected.items():
        out, row = first_rank(capsys, gpt3, "--gpus", T * P, "--pp", P, "--schedule", name)
        assert out["schedule"]["name"] == name and out["schedule"]["source"] == load_schedules().by_name[name].source
        assert row["stage"] == 0 and row["in_flight"] == flight, name
        assert row["activations"] == pytest.approx(layers * flight * LAYER, rel=1e-9), name
        assert row["ends"] == pytest.approx(flight * EMBEDDING + head * head_ends, rel=1e-9), name
        assert row["weight"] == pytest.approx(weight, rel=1e-9), name
    # interleaved with 2 virtual stages: Korthikanti et al. 2022, section 4.2.3, 1 + (p - 1)/(p v) times 1F1B
    out, row = first_rank(capsys, gpt3, "--gpus", T * P, "--pp", P, "--vpp", 2)
    assert out["schedule"]["name"] == "interleaved" and row["in_flight"] == pytest.approx(8 * (1 + 7 / 16))


@pytest.mark.parametrize(
    "extra, said",
    [
        (("--schedule", "zb-h2", "--vpp", "2"), "--schedule zb-h2 runs with --vpp 1, not --vpp 2"),
        (("--schedule", "interleaved"), "--schedule interleaved runs with --vpp above 1, not --vpp 1"),
        (("--schedule", "dualpipe", "--pp", "1"), "--schedule dualpipe needs --pp 2 or more, not --pp 1"),
        (("--schedule", "gpipe"), "--schedule gpipe: known: 1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipe"),
    ],
)
def test_a_schedule_the_layout_cannot_run_is_refused(gpt3, capsys, extra, said):
    assert main(["fit", str(gpt3), "--seq", str(S), "--gpus", "64", *extra]) == 2
    err = capsys.readouterr().err
    assert err == f"speccat: bad_argument: {said}\n"
