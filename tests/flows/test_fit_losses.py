"""Loss kernels in `speccat fit --loss` (catalogue/records/ends.yaml `losses`), worked by hand on
the GPT-3-175B shape of tests/flows/test_fit_schedules.py: the megatron stack, fp16, 96 layers on
8 GPUs at tp 8, pp 1, seq 2048, so one rank holds every layer, the embedding and the head, with
its share of the vocabulary, V / t = 6304 entries:

- eager (transformers' causal-LM loss): the head's input (2 B a token), the fp32 log-probabilities
  over the rank's vocabulary, the int64 labels (with their pad: one micro-batch), the scalar
  count; working, the fp32 gradients of the log-probabilities and of the logits: 2 S V/t 4.
- chunked (256 tokens, each recomputed): the head's input and the labels; working, at this width
  three gradients of the rank's head weight (V/t x h, 2 B) and a chunk's input gradient, beside
  the head input's gradient: 3 V/t h 2 + 256 h 2 + S h 2.
- fused-linear (Liger): the gradients of the head's input and weight; working, one chunk of
  Liger's next_power_of_2(cdiv(2048, cdiv(6304, 12288))) = 2048 tokens of logits, the fp32
  per-token losses and the head's input: 2048 V/t 2 + S (4 + h 2).

The loss's working set counts once on the rank holding the head; the rest of the rank is the
same whichever kernel runs.
"""

from __future__ import annotations

import json

import pytest

from speccat.catalogue.records.ends import load_ends
from speccat.catalogue.records.oprecords import load_records
from speccat.flows.cli import main
from support.pricing_specs import GPT3_175B_SHAPE

S, H, T, L, V = 2048, 12288, 8, 96, 50432
VT = V / T  # the rank's share of the vocabulary


@pytest.fixture(scope="module")
def gpt3(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt3-175b-shape")
    (folder / "config.json").write_text(json.dumps({**GPT3_175B_SHAPE, "num_hidden_layers": L}))
    return folder


def one_rank(capsys, gpt3, *extra) -> tuple[dict, dict]:
    """fit's output and its no-recompute row at tp 8, pp 1, dp 1, ZeRO 0."""
    argv = ["fit", str(gpt3), "--stack", "megatron", "--seq", str(S), "--gpus", str(T), "--tp", str(T), "--pp", "1",
            "--set", "flash_attention=false", "--set", "dtype=fp16", "--gpu-mem", "2000GiB", "--zero", "0", "--json", "--top", "0",
            *extra]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    return out, next(r for r in out["rows"] if r["switch_set"] == "none")


def by_hand() -> dict[str, tuple[float, float]]:
    """Per kernel: (the logits end's bytes, the working set), worked from the shape."""
    return {
        "eager": (S * (2 * H + 4 * VT + 8) + 8 + 4, 2 * S * VT * 4),
        "chunked": (S * (2 * H + 8) + 8, 3 * VT * H * 2 + 256 * H * 2 + S * H * 2),
        "fused-linear": (S * 2 * H + VT * H * 2, 2048 * VT * 2 + S * (4 + 2 * H)),
    }


def test_each_loss_kernel_on_the_gpt3_shape_by_hand(gpt3, capsys):
    out, eager = one_rank(capsys, gpt3)
    assert out["loss"] == {"name": "eager", "chunk_tokens": None, "source": load_ends(load_records()).losses["eager"].source}
    hand = by_hand()
    assert eager["loss_working"] == pytest.approx(hand["eager"][1], rel=1e-12)
    for name in ("chunked", "fused-linear"):
        out, row = one_rank(capsys, gpt3, "--loss", name)
        assert out["loss"]["name"] == name
        logits, working = hand[name]
        # the same rank but for the logits end and the loss's working set
        assert row["ends"] - eager["ends"] == pytest.approx(logits - hand["eager"][0], abs=2), name
        assert row["loss_working"] == pytest.approx(working, abs=1), name
        assert (row["activations"], row["weight"], row["grad"], row["optimizer"]) == (
            eager["activations"], eager["weight"], eager["grad"], eager["optimizer"]), name  # fmt: skip
        assert row["total"] == pytest.approx(row["activations"] + row["ends"] + row["loss_working"] + row["weight"] + row["grad"]
                                             + row["optimizer"], abs=6), name  # fmt: skip
    # at this shape (2,048 tokens, a 12,288-wide head) chunked holds more than eager: its three
    # head-weight gradients, 0.43 GiB, outweigh eager's log-probabilities and their gradients
    chunked = one_rank(capsys, gpt3, "--loss", "chunked")[1]
    more = sum(hand["chunked"]) - sum(hand["eager"])
    assert 0.3 * 2**30 < more and chunked["total"] - eager["total"] == pytest.approx(more, abs=8)


def test_the_loss_working_set_counts_once_on_the_rank_holding_the_head(gpt3, capsys):
    """At pp 8 the first stage (8 micro-batches in flight) holds no head and no working set; the
    last holds the head's tensors for its one micro-batch and the working set once."""
    argv = ["fit", str(gpt3), "--stack", "megatron", "--seq", str(S), "--gpus", str(T * 8), "--tp", str(T), "--pp", "8",
            "--set", "flash_attention=false", "--set", "dtype=fp16", "--gpu-mem", "2000GiB", "--zero", "0", "--json", "--top", "0"]  # fmt: skip
    assert main(argv) == 0
    rows = [r for r in json.loads(capsys.readouterr().out)["rows"] if r["dp"] == 1]
    assert rows and all(r["loss_working"] == (pytest.approx(2 * S * VT * 4, rel=1e-12) if r["stage"] == 7 else 0) for r in rows)


def test_the_text_names_the_loss(gpt3, capsys):
    argv = ["fit", str(gpt3), "--seq", str(S), "--gpus", str(T), "--tp", str(T), "--gpu-mem", "2000GiB", "--loss", "fused-linear", "--top", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "; loss fused-linear" in out.splitlines()[1] and "loss_working" in out.splitlines()[2]


def test_an_unknown_loss_is_refused(gpt3, capsys):
    assert main(["fit", str(gpt3), "--seq", str(S), "--gpus", "8", "--loss", "focal"]) == 2
    assert capsys.readouterr().err == "speccat: bad_argument: --loss focal: known: eager, chunked, fused-linear\n"
