"""Tiny models built from shipped configs at width 128, which tests run whole on real CPU tensors
(tests/census/test_whole_model.py, tests/flows/test_fit_whole_step.py; the hybrid:
tests/census/test_whole_hybrid.py, tests/flows/test_fit_whole_hybrid.py)."""

from __future__ import annotations

import contextlib
import json

import torch
from conftest import load_shipped

S, WIDTH, HEAD_DIM, VOCAB = 256, 128, 32, 1000
TINY = dict(hidden_size=WIDTH, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=HEAD_DIM, vocab_size=VOCAB)  # fmt: skip
MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": TINY,
    "Qwen/Qwen3-30B-A3B": {**TINY, "moe_intermediate_size": 64, "num_experts": 8, "num_experts_per_tok": 2},
}
# A hybrid: Qwen3-Next's gated delta-rule linear attention beside full attention, every layer a
# MoE with a gated shared expert. Four layers keep the shipped pattern (full_attention_interval
# 4: three linear-attention layers, then one full): the delta rule's value heads twice its key
# heads, as shipped; rotary over a quarter of each head (partial_rotary_factor 0.25: 8 of 32).
HYBRID = {
    "Qwen/Qwen3-Next-80B-A3B-Thinking": {**MODELS["Qwen/Qwen3-30B-A3B"], "num_hidden_layers": 4, "shared_expert_intermediate_size": 64,
                                         "linear_num_key_heads": 2, "linear_key_head_dim": 32, "linear_num_value_heads": 4,
                                         "linear_value_head_dim": 32},
}  # fmt: skip


def tiny_config(repo: str) -> dict:
    config = {**load_shipped(repo), **{**MODELS, **HYBRID}[repo]}
    config.pop("rope_scaling", None)
    return config


def priced(config: dict) -> float:
    """What the planner adds for one rank holding the whole stack of `config`, one micro-batch at
    S tokens, nothing recomputed: each kind's price (the census's spec, the shipped records, the
    transformers stack at tp 1, cp 1) times its layers, plus the model's ends
    (catalogue/records/ends.yaml)."""
    from speccat.catalogue.records.ends import load_ends, price_ends_at
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.pricing import price_layers, stack_counts
    from speccat.catalogue.records.settings import load_settings
    from speccat.census import run_census

    spec = run_census(config, name="tiny", seq_length=S).to_dict()
    records, grid = load_records(), load_settings()
    setting = grid.setting({"stack": "transformers", "seq_length": S, "tp": 1, "cp": 1})
    prices = price_layers(spec, records, grid.with_settings([setting]))
    counts = stack_counts(spec)  # layers per kind, summed over the stack's runs
    layers = sum(float(prices.total[i, 0, 0]) * counts[kind] for i, kind in enumerate(prices.kinds))
    return layers + sum(price_ends_at(spec, records, setting, grid.dtype_bytes, load_ends(records)).values())


@contextlib.contextmanager
def one_thread():
    """torch on one thread while the block runs: the delta rule's stand-in steps through the tokens
    in small ops, which two threads on a shared machine make many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def two_stage_fit(config: dict, folder, capsys) -> dict:
    """`speccat fit`'s row with nothing recomputed for `config` (written to `folder`) on two GPUs
    at pp 2, ZeRO 0 and a budget nothing exceeds, as the whole-step checks compare it."""
    from speccat.flows.cli import main

    (folder / "config.json").write_text(json.dumps(config))
    argv = ["fit", str(folder), "--seq", str(S), "--gpus", "2", "--pp", "2", "--zero", "0", "--gpu-mem", "1000GiB", "--json", "--top", "0"]
    assert main(argv) == 0
    return next(r for r in json.loads(capsys.readouterr().out)["rows"] if r["switch_set"] == "none")
