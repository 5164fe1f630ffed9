"""`speccat census CONFIG.json [--json]`."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import SNAPSHOT
from speccat.census.spec import ModelSpec
from speccat.flows.cli import main

MIXTRAL = SNAPSHOT / "mistralai__Mixtral-8x7B-v0.1" / "config.json"


def test_census_json_prints_the_model_spec(capsys):
    from support.shipped_specs import shipped_spec

    assert main(["census", str(MIXTRAL), "--json"]) == 0
    out = capsys.readouterr().out
    spec = ModelSpec.from_json(out)
    # The name defaults to ORG/NAME from the snapshot folder ORG__NAME.
    assert spec == shipped_spec("mistralai/Mixtral-8x7B-v0.1")  # run_census of the same file, by that name
    assert json.loads(out)["layers"] == [{"kind": "decoder", "count": 32}]


def test_census_name_and_sequence_length_options(capsys, tmp_path):
    path = tmp_path / "mixtral.json"
    shutil.copy(MIXTRAL, path)
    assert main(["census", str(path), "--json", "--seq", "1024", "--name", "my/moe"]) == 0
    spec = ModelSpec.from_json(capsys.readouterr().out)
    assert spec["name"] == "my/moe"
    assert spec["measured"]["decoder"]["seq_length"] == 1024
    assert main(["census", str(path), "--json"]) == 0
    assert ModelSpec.from_json(capsys.readouterr().out)["name"] == "mixtral"  # the file's stem


def test_census_summary_is_readable(capsys):
    assert main(["census", str(MIXTRAL)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mistralai/Mixtral-8x7B-v0.1  (mixtral)\n")
    assert "num_experts=8" in out and "num_experts_per_tok=2" in out
    assert "stack: decoder×32" in out
    assert "ops:    attMM=4 attBMM=2 ffMM=3 softmax=1 dropout=0 normOp=2 gather=4 headCast=1 ffAct=1 linrec=0" in out
    assert "(speccat::flash_attention, grouped_mm)" in out
    # q, k, v, o, both products of the core, the router and 2 of 8 experts (h 4096, 32 heads of
    # 128, 8 kv heads, intermediate 14336): 2·s·h·(32 + 16)·128 + 2·s·4096·h + 4·s²·4096 + 2·s·h·8 + 2·3·2·s·h·14336
    assert "forward FLOPs of one layer at s=4096: 3,504,961,748,992" in out
    # the backward peak, in the gather back to token order: Mixtral's routing weights are fp32, so
    # the weighted outputs' gradients are too: three fp32 tensors and one bf16 of k · h a token,
    # beside the gradient received (h, bf16), less the router's freed int64 indices (k)
    line = next(x for x in out.splitlines() if "backward peak of one layer (beyond what was alive before it began) at s=4096:" in x)
    h, k = 4096, 2
    assert float(line.split(":")[-1].split()[0].replace(",", "")) == h * 2 + k * h * (3 * 4 + 2) - k * 8
    assert "      working set: -1×2 int64 +1×4,096 compute +1×8,192 compute +3×8,192 float32\n" in out


def test_census_of_a_missing_file_is_one_error_line(capsys, tmp_path):
    assert main(["census", str(tmp_path / "absent.json")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("speccat: not_found: ") and err.count("\n") == 1


def test_census_reads_a_folder_holding_config_json(capsys):
    from conftest import SNAPSHOT

    assert main(["census", str(SNAPSHOT / "Qwen__Qwen3-0.6B"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "Qwen/Qwen3-0.6B"  # ORG__NAME/ names it
