"""`speccat fit` takes what `speccat price` takes (issue 27, item 1): a config file or folder,
censused now, any stack and setting field (`--stack`, `--set`), any recipe of states.yaml
(`--recipe`); and it names the spec's origin, the stack, the recipe and the accelerator.

The acceptance case: a GPT-3-175B-shaped config (the GPT-NeoX config of
tests/pricing/test_records_stacks.py with its 96 layers) on 64 GPUs at tp 8, pp 8, seq 2048, fp16,
flash attention off, on the megatron stack. The first stage holds 12 layers, 8 micro-batches
in flight (1F1B), the embedding, and 18 bytes per parameter of its share. Worked by hand:

- activations, Korthikanti et al. 2022, Table 2 (tensor and sequence parallel):
  sbh(34/t + 5as/(ht)) per layer, sbh·34/t with the attention core (softmax, its dropout:
  headCast) recomputed; plus what the paper leaves out, the two LayerNorms' fp32 mean and rstd,
  16 bytes per token, split over t by sequence parallelism;
- the embedding's output (2h bytes per token, split over t) and the token ids (8 bytes);
- weights, gradients and optimizer: Megatron's 18 bytes per parameter over the stage's
  parameters: 12 layers of (12h² + 9h)/t (the projections and their biases split over t) + 4h
  (two LayerNorms, replicated), and the vocabulary-parallel embedding V·h/t. Megatron-LM's own
  formula (theoretical_memory_usage.py, compute_weight_and_optimizer_memory) leaves the linear
  biases out and splits the norms over t too; it is checked to agree within 0.03%.
"""

from __future__ import annotations

import json

import pytest
from conftest import SNAPSHOT

from speccat.flows.cli import main
from support.pricing_specs import GPT3_175B_SHAPE

S, H, A, T, P, L, V = 2048, 12288, 96, 8, 8, 96, 50432


@pytest.fixture(scope="module")
def gpt3(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt3-175b-shape")
    (folder / "config.json").write_text(json.dumps({**GPT3_175B_SHAPE, "num_hidden_layers": L}))
    return folder


def fit_json(capsys, *argv) -> dict:
    assert main(["fit", *map(str, argv), "--json", "--top", "0"]) == 0
    return json.loads(capsys.readouterr().out)


def test_gpt3_175b_first_stage_by_hand(gpt3, capsys):
    out = fit_json(capsys, gpt3, "--stack", "megatron", "--seq", S, "--gpus", 64, "--tp", T, "--pp", P,
                   "--set", "flash_attention=false", "--set", "dtype=fp16", "--gpu-mem", "200GiB")  # fmt: skip
    assert out["stack"] == "megatron" and out["setting"]["flash_attention"] is False and out["setting"]["dtype"] == "fp16"
    assert out["recipe"]["name"] == "megatron_bf16_adam" and out["recipe"]["bytes_per_param"]["total"] == 18
    assert out["accelerator"] == "H100-SXM" and out["spec_source"].startswith("censused now from")
    layers, flight, sbh = L // P, P, S * H  # the first stage: 12 layers, 8 micro-batches in flight
    norm_stats = 2 * 2 * 4 * S / T  # two LayerNorms' fp32 mean and rstd per token, sequence-parallel
    params = layers * ((12 * H * H + 9 * H) / T + 4 * H) + V * H / T
    ends = flight * S * 8  # the int64 ids; the embedding's output is the first layer's LayerNorm input, in its 34 sbh
    megatron_params = (2 * L * H * H * ((1 + 1) + 4 + 2 / H + 1 / (L * H)) / P + H * V) / T  # MHA: groups = heads; ffn 4h
    assert params == pytest.approx(megatron_params, rel=3e-4)
    rows = {r["switch_set"]: r for r in out["rows"] if (r["dp"], r["tp"], r["pp"], r["zero"]) == (1, T, P, 0)}
    for switch_set, per_sbh in (("none", 34 / T + 5 * A * S / (H * T)), ("headCast,softmax", 34 / T)):
        row = rows[switch_set]
        activations = layers * flight * (sbh * per_sbh + norm_stats)
        assert row["stage"] == 0 and row["in_flight"] == flight
        assert row["activations"] == pytest.approx(activations, rel=1e-9), switch_set
        assert row["ends"] == pytest.approx(ends, rel=1e-9)
        assert (row["weight"], row["grad"], row["optimizer"]) == pytest.approx((2 * params, 4 * params, 12 * params), rel=1e-9)
        # the selective set's backward remakes one layer's attention scores, softmax and dropout mask (5as²b/t) first
        remade = sbh * 5 * A * S / (H * T) if switch_set != "none" else 0
        assert row["remade"] == pytest.approx(remade, rel=1e-9)
        # then forms its gradients: the working set the census states for this shape at its peak (in
        # the MLP's backward), the gradient received and one more of the hidden width (2 bytes
        # each), one of the 4h MLP width (2 bytes), less a hidden dropout's freed mask (1 byte),
        # each split over t (sequence parallel; the MLP's width inside the tp region): 11 sbh/t
        assert row["backward"] == pytest.approx(remade + sbh * (2 * 2 + 4 * 2 - 1) / T, rel=1e-9)
        assert row["total"] == pytest.approx(activations + ends + row["backward"] + 18 * params, rel=1e-9)
    # the same shape on the transformers stack with flash attention keeps no s² scores: less than Table 2's
    flash = fit_json(capsys, gpt3, "--seq", S, "--gpus", 64, "--tp", T, "--pp", P, "--gpu-mem", "200GiB")
    assert flash["stack"] == "transformers"
    none = next(r for r in flash["rows"] if r["switch_set"] == "none" and (r["dp"], r["zero"]) == (1, 0))
    assert none["activations"] < rows["none"]["activations"]


QWEN_SMALL = SNAPSHOT / "Qwen__Qwen3-0.6B"


def test_a_recipe_is_priced_and_named(capsys):
    argv = (QWEN_SMALL, "--seq", 4096, "--gpus", 1, "--gpu-mem", "80GiB")
    default = fit_json(capsys, *argv)
    pure = fit_json(capsys, *argv, "--recipe", "pure_bf16_adam")
    assert pure["recipe"]["name"] == "pure_bf16_adam" and "zeros_like" in pure["recipe"]["source"]
    a, b = default["rows"][0], pure["rows"][0]
    assert (a["dp"], a["zero"]) == (b["dp"], b["zero"]) == (1, 0)
    params = a["weight"] / 2  # 2 bytes of bf16 weight each, in both recipes
    assert (b["weight"], b["grad"], b["optimizer"]) == pytest.approx((2 * params, 2 * params, 4 * params), abs=1)
    assert (a["grad"], a["optimizer"]) == pytest.approx((4 * params, 12 * params), abs=1)


def test_the_text_names_the_origin_the_stack_the_recipe_and_the_accelerator(capsys):
    assert main(["fit", str(QWEN_SMALL), "--seq", "4096", "--gpus", "1", "--stack", "megatron", "--recipe", "adam_8bit",
                 "--accelerator", "MI300X", "--top", "1"]) == 0  # fmt: skip
    second = capsys.readouterr().out.splitlines()[1]
    assert second.startswith(f"spec: censused now from {QWEN_SMALL} (not from the catalogue); stack megatron (")
    assert "recipe adam_8bit (6.00391 B/param: Dettmers et al. 2022" in second and second.endswith("accelerator MI300X; schedule 1f1b; loss eager")


@pytest.mark.parametrize(
    "extra, reason, said",
    [
        (["--recipe", "lion"], "bad_argument", "--recipe lion: known: megatron_bf16_adam"),
        (["--set", "tp=2"], "bad_argument", "--set tp: fit sets it from --tp"),
        (["--set", "seq_length=4096"], "bad_argument", "--set seq_length: fit sets it from --seq"),
        (["--set", "nonsense"], "bad_argument", "expected FIELD=VALUE"),
        (["--set", "bogus=1"], "unknown_field", "bogus"),
        (["--stack", "deepspeed"], "bad_value", "deepspeed"),
    ],
)
def test_bad_settings_and_recipes_are_refused_before_the_census(capsys, tmp_path, extra, reason, said):
    missing = tmp_path / "absent" / "config.json"  # refused before the config is even read
    assert main(["fit", str(missing), "--seq", "4096", "--gpus", "1", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"speccat: {reason}: ") and said in err and err.count("\n") == 1, err


def test_a_missing_config_is_not_found(capsys, tmp_path):
    assert main(["fit", str(tmp_path / "absent.json"), "--seq", "4096", "--gpus", "1"]) == 2
    assert capsys.readouterr().err.startswith("speccat: not_found: ")
