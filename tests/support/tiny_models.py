"""Tiny models built from shipped configs at width 128, which tests run whole on real CPU tensors
(tests/census/test_whole_model.py, tests/flows/test_fit_whole_step.py)."""

from __future__ import annotations

from conftest import load_shipped

S, WIDTH, HEAD_DIM, VOCAB = 256, 128, 32, 1000
TINY = dict(hidden_size=WIDTH, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=HEAD_DIM, vocab_size=VOCAB)  # fmt: skip
MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": TINY,
    "Qwen/Qwen3-30B-A3B": {**TINY, "moe_intermediate_size": 64, "num_experts": 8, "num_experts_per_tok": 2},
}


def tiny_config(repo: str) -> dict:
    config = {**load_shipped(repo), **MODELS[repo]}
    config.pop("rope_scaling", None)
    return config
