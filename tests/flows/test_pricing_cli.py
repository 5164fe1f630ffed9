"""`speccat price CONFIG.json` (flows/cli_price.py), run in-process."""

from __future__ import annotations

import json
import os

import pytest
from conftest import SNAPSHOT

from speccat.catalogue.records.ends import load_ends
from speccat.catalogue.records.cost import load_costs, stored_version
from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.settings import load_settings
from speccat.flows.cli import main

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

LLAMA = str(SNAPSHOT / "meta-llama__Llama-3.1-8B-Instruct" / "config.json")
QWEN35 = str(SNAPSHOT / "Qwen__Qwen3.5-9B" / "config.json")


def run_json(capsys, *argv) -> tuple[int, dict]:
    code = main(["price", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_json_contract_for_llama_8b(capsys):
    code, out = run_json(capsys, LLAMA)
    assert code == 0
    assert set(out) == {"name", "records_version", "setting", "switches", "kinds", "model_total"}
    assert out["name"] == "meta-llama/Llama-3.1-8B-Instruct"
    records = load_records()
    assert out["records_version"] == stored_version(records, load_costs(records), load_ends(records))  # what the catalogue's rows are keyed by
    assert out["setting"] == dict(load_settings().setting())
    assert out["switches"] == []
    assert out["kinds"] == {
        "decoder": {"layers": 32, "attention": 117_964_800, "ffn": 503_316_480, "norm": 201_359_360, "total": 822_640_640}
    }  # 4096 tokens × 28,800, 122,880, 49,160 bytes (tests/pricing/test_pricing.py derives them)
    assert out["model_total"] == 32 * 822_640_640


def test_switch_sets_and_full_recompute(capsys):
    code, out = run_json(capsys, LLAMA, "--switches", "all")
    assert code == 0 and out["switches"] == list(load_records().switches)
    assert out["kinds"]["decoder"]["total"] == 419_430_400 and out["model_total"] == 32 * 419_430_400
    code, out = run_json(capsys, LLAMA, "--switches", "full")
    assert out["switches"] == "full"
    assert out["kinds"] == {"decoder": {"layers": 32, "total": 33_554_432}}
    assert out["model_total"] == 32 * 33_554_432
    code, out = run_json(capsys, LLAMA, "--switches", "softmax, attBMM")
    assert out["switches"] == ["attBMM", "softmax"]  # mask-bit order
    # Llama at s=4096 under flash: softmax keeps the kernel's outputs, s·(4·a + 2·a·dh) bytes (the
    # fp32 log-sum-exp and the output), attBMM s·2·(a·dh + 2·n_kv·dh) bytes (q, k, v)
    assert 822_640_640 - out["kinds"]["decoder"]["total"] == 4096 * 4 * 32 + 4096 * 2 * (4096 + 2 * 1024 + 4096)


def test_settings_from_the_command_line(capsys):
    code, out = run_json(capsys, QWEN35, "--seq", "8192", "--tp", "2", "--cp", "2", "--set", "cp_algo=ulysses", "--set", "flash_attention=false")
    assert code == 0
    setting = out["setting"]
    assert (setting["seq_length"], setting["tp"], setting["cp"], setting["cp_algo"], setting["flash_attention"]) == (8192, 2, 2, "ulysses", False)
    assert setting["setting_id"] == load_settings().setting({k: setting[k] for k in setting if k != "setting_id"})["setting_id"]
    kinds = out["kinds"]
    assert {k: v["layers"] for k, v in kinds.items()} == {"linear_attention": 24, "full_attention": 8}
    assert out["model_total"] == 24 * kinds["linear_attention"]["total"] + 8 * kinds["full_attention"]["total"]


@pytest.mark.parametrize(
    "argv, reason",
    [
        (["--switches", "attBMM,sofmax"], "unknown_switch"),
        (["--tp", "0"], "bad_value"),
        (["--set", "dtype=fp8"], "bad_value"),
        (["--set", "sequence=2"], "unknown_field"),
        (["--set", "novalue"], "bad_value"),
    ],
)
def test_refusals_exit_2_with_a_reason(capsys, argv, reason):
    code, out = run_json(capsys, LLAMA, *argv)
    assert code == 2 and out["error"]["reason"] == reason
    code = main(["price", LLAMA, *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"speccat: {reason}: ") and err.count("\n") == 1


def test_a_census_refusal_is_the_census_error(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    code, out = run_json(capsys, str(bad))
    assert code == 2 and out["error"]["reason"] == "bad_json"


def test_readable_output(capsys):
    assert main(["price", LLAMA, "--switches", "normOp", "--units", "bytes"]) == 0
    out = capsys.readouterr().out
    assert "recomputed: normOp" in out
    # normOp recomputed drops the norm part: 822,640,640 - 201,359,360
    assert "621,281,280 B" in out and "model total: 19,881,000,960 B" in out
    assert main(["price", LLAMA, "--switches", "normOp"]) == 0  # human units: the same figures
    out = capsys.readouterr().out
    assert "592.50 MiB" in out and "model total: 18.52 GiB" in out  # 621,281,280 B; 19,881,000,960 B
