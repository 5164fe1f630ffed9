"""The attention kernel a transformers price assumes (the fixed setting `attention_kernel`,
docs/census.md "Which sdpa kernel runs on CUDA"): sliding and full layers are kinds apart, `auto`
prices what torch's sdpa keeps on CUDA, `flash` what the census measures.

The expected numbers come from outside the records: bytes a real forward kept on an NVIDIA H200
(torch 2.11+cu130, transformers 5.25, bf16; `python -m bench gpu`'s harness, one layer of each
kind and layer type, saved-tensor hooks), and per-kernel saves of torch's
`scaled_dot_product_attention` called alone on that GPU, or the mask and repeated heads worked
by hand from the config."""

from __future__ import annotations

import json

import pytest
from support.shipped_specs import shipped_spec

from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.settings import load_settings

GEMMA3 = "google/gemma-3-27b-it"  # 62 layers, every sixth full; sliding window 1024; 32 heads, 16 kv heads of 128
STARCODER2 = "bigcode/starcoder2-7b"  # every layer sliding, window 4096; 36 heads, 4 kv heads of 128
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"  # no window; 32 heads, 8 kv heads of 128


def per_token(repo: str, seq: int, **setting) -> dict[str, float]:
    """kind -> one rank's bytes per token of one layer, nothing recomputed."""
    grid = load_settings()
    one = grid.with_settings([grid.setting({"seq_length": seq, **setting})])
    priced = price_layers(shipped_spec(repo).to_dict(), load_records(), one)
    return {kind: float(priced.total[i, 0, 0]) / seq for i, kind in enumerate(priced.kinds)}


def test_sliding_and_full_layers_are_kinds_apart():
    """gemma-3's layers are built alike and the census's kernel keeps alike for both, but they call
    it with different windows: two kinds, each stating its window."""
    spec = shipped_spec(GEMMA3)
    counts: dict[str, int] = {}
    for run in spec["layers"]:
        counts[run["kind"]] = counts.get(run["kind"], 0) + run["count"]
    assert counts == {"sliding_dense": 52, "full_dense": 10}
    assert spec["variants"]["sliding_dense"]["attention_window"] == 1024
    assert spec["variants"]["full_dense"]["attention_window"] == 0
    assert all(v["attention_window"] == 0 for v in shipped_spec(LLAMA)["variants"].values())


# (repo, kind, sequence length, bytes per token the H200 kept)
H200 = [
    (GEMMA3, "sliding_dense", 4096, 456_037.25),
    (GEMMA3, "sliding_dense", 16384, 480_597.31),
    (GEMMA3, "full_dense", 4096, 439_653.25),
    (GEMMA3, "full_dense", 16384, 439_637.31),
    (STARCODER2, "decoder", 4096, 165_024.0),
    (STARCODER2, "decoder", 16384, 189_600.0),
    (LLAMA, "decoder", 4096, 200_840.0),
    (LLAMA, "decoder", 16384, 200_840.0),
]


@pytest.mark.parametrize(("repo", "kind", "seq", "real"), H200)
def test_auto_prices_what_an_h200_kept(repo, kind, seq, real):
    """sdpa chose cuDNN attention for every one of these layers; the sliding ones kept the s × s
    mask and k and v repeated to every head beside what flash keeps."""
    assert per_token(repo, seq)[kind] == pytest.approx(real, rel=1e-4)


def test_flash_is_what_the_census_measures():
    """At `flash` the sliding layer prices as the full one (the census's kernel takes the window
    as an argument and keeps no mask); the H200's sliding layers kept more."""
    flash = per_token(GEMMA3, 16384, attention_kernel="flash")
    assert flash["sliding_dense"] == flash["full_dense"]
    assert flash["sliding_dense"] < 480_597.31 * 0.92


@pytest.mark.parametrize(("seq", "tp", "extra"), [
    # the bf16 mask, one s × s table per sequence (2·s bytes a token, whole on every tp rank), and
    # k and v repeated from 16 to 32 heads of 128 (2 bytes each), split over the tp ranks
    (8192, 1, 2 * 8192 + 2 * (32 - 16) * (128 + 128)),
    (8192, 2, 2 * 8192 + 2 * (32 - 16) * (128 + 128) / 2),
    (1024, 1, 2 * 1024 + 2 * (32 - 16) * (128 + 128)),  # a sequence as long as the window: masked
    (512, 1, 0),  # shorter than the window: transformers hands sdpa no mask
    (8192, 16, 2 * 8192),  # one kv head a rank: repeating it is an expanded view, no copy
])  # fmt: skip
def test_auto_over_flash_worked_by_hand(seq, tp, extra):
    auto = per_token(GEMMA3, seq, tp=tp, cp=1)
    flash = per_token(GEMMA3, seq, tp=tp, cp=1, attention_kernel="flash")
    assert auto["sliding_dense"] - flash["sliding_dense"] == pytest.approx(extra, abs=1e-6)
    assert auto["full_dense"] == flash["full_dense"]


def test_math_and_efficient_as_torch_keeps_them_on_an_h200():
    """torch's sdpa called alone on the H200 with Llama-3.1-8B's attention (32 query heads, 8 kv
    heads of 128, bf16, causal): at 1024 tokens flash kept 20,608 bytes per token (q, k, v, the
    output, the fp32 log-sum-exp) and math 311,296 (q, k and v upcast to fp32 at every head, two
    fp32 1024-wide probabilities a head), whose heads-major output o_proj then keeps a copy of
    (32·128·2 bytes); at 1032 tokens with k and v repeated to every head (the memory-efficient
    kernel takes no GQA) flash kept 32,896.02 and the memory-efficient kernel 32,898.99 (its
    log-sum-exp padded to 1056 queries), against flash's 20,608.02 unrepeated."""
    flash, math = per_token(LLAMA, 1024, attention_kernel="flash"), per_token(LLAMA, 1024, attention_kernel="math")
    assert math["decoder"] - flash["decoder"] == pytest.approx(311_296 - 20_608 + 32 * 128 * 2, abs=1e-6)
    flash, efficient = per_token(LLAMA, 1032, attention_kernel="flash"), per_token(LLAMA, 1032, attention_kernel="efficient")
    assert efficient["decoder"] - flash["decoder"] == pytest.approx(32_898.992248 - 20_608.023256, abs=0.05)  # less the seeds, 24 and 16 bytes a call


def test_a_model_transformers_runs_through_no_sdpa_prices_at_flash():
    """gpt-oss's class refuses sdpa (its sinks): the census states it, and `auto` prices its
    sliding layers at the flash kernel it trains with, no mask or repeated heads beside it."""
    spec = shipped_spec("openai/gpt-oss-20b")
    assert spec["sdpa_refused"] is True and shipped_spec(GEMMA3)["sdpa_refused"] is False
    assert per_token("openai/gpt-oss-20b", 8192) == per_token("openai/gpt-oss-20b", 8192, attention_kernel="flash")
    forced = per_token("openai/gpt-oss-20b", 8192, attention_kernel="efficient")
    assert forced["sliding_moe"] > per_token("openai/gpt-oss-20b", 8192)["sliding_moe"] + 2 * 8192


def test_fit_names_the_kernel_and_prices_the_one_asked_for(capsys, tmp_path):
    """`speccat fit` on a config file: its answer names the attention kernel (auto unless --set),
    and at flash the sliding layers keep no mask or repeated heads, so a stage keeps less under a
    switch set that keeps the kernel's saves (attBMM), and as much under one that drops them."""
    from conftest import shipped_config_paths

    from speccat.flows.cli import main

    config = next(p for p in shipped_config_paths() if "gemma-3-27b" in str(p))
    argv = ["fit", str(config), "--gpu-mem", "141GiB", "--seq", "8192", "--gpus", "8", "--tp", "1", "--cp", "8",
            "--db", str(tmp_path / "none.duckdb"), "--json", "--top", "0"]  # fmt: skip
    answers = {}
    for kernel in ("auto", "flash"):
        assert main([*argv, *(["--set", f"attention_kernel={kernel}"] if kernel != "auto" else [])]) == 0
        answers[kernel] = json.loads(capsys.readouterr().out)
        assert answers[kernel]["setting"]["attention_kernel"] == kernel
    auto = {r["switch_set"]: r["activations"] for r in answers["auto"]["rows"]}
    flash = {r["switch_set"]: r["activations"] for r in answers["flash"]["rows"]}
    common = auto.keys() & flash.keys()
    assert {k for k in common if flash[k] < auto[k]} == {k for k in common if "attBMM" not in k and k != "full"} != set()
    assert all(flash[k] == auto[k] for k in common if "attBMM" in k or k == "full")
