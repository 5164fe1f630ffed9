"""`speccat fit`'s total against a real training step's peak: a tiny Llama (dense) and a tiny
Qwen3 MoE (tests/support/tiny_models.py), bf16 on CPU, cut into two pipeline stages and run
as 1F1B runs them on 2 ranks: stage 0 (the embedding and layer 0) takes two micro-batches
forward before the first comes back, stage 1 (layer 1, the final norm, the head and the loss)
one. Each stage's peak is the most bytes alive at any moment of its forwards and backward
(tests/support/storage_tracker.py: the received activations and gradients included, the
parameters and their gradient buffers left out) plus its model states, 18 bytes a parameter as
fit's default recipe holds them (Megatron's distributed optimizer at dp 1: bf16 weight, fp32
gradient, fp32 master weight and Adam's two moments), counted from the stage's own parameters.

fit (`--pp 2 --gpus 2`, nothing recomputed) names the fullest stage, the one whose peak is the
highest, and its total is that peak less at most two tensors fit does not price: the rotary cos
and sin each stage makes (s x head_dim, bf16, each) and, on stage 1, the activation it received,
which the pipeline keeps for the backward of its micro-batch (Megatron-LM's input_tensors) while
Llama's and Qwen3's first RMSNorm keep an fp32 copy of it rather than it. (The MoE's grouped-matmul
offsets, 64 bytes, fit under the slack the timing of the peak leaves.) The layers' own backward
working sets are smaller at this size than the loss's, which fit adds once on the last stage."""

from __future__ import annotations

import gc

import pytest
import torch
from support.storage_tracker import StorageTracker
from support.tiny_models import HEAD_DIM, MODELS, S, VOCAB, WIDTH, tiny_config, two_stage_fit
from transformers import AutoConfig, AutoModelForCausalLM

RECIPE_BYTES = 18  # bytes a parameter: states.yaml's default recipe at dp 1


def stage_peaks(config: dict) -> list[float]:
    """Each stage's measured peak, model states included."""
    hub = AutoConfig.for_model(**{k: v for k, v in config.items() if k != "architectures"})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hub, dtype=torch.bfloat16, attn_implementation="sdpa").train()
    base, layers = model.model, list(model.model.layers)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # the buffer each step sums into, part of the model states
    existing = [*model.parameters(), *model.buffers(), *(p.grad for p in model.parameters())]
    ids = [torch.randint(0, VOCAB, (1, S)) for _ in range(2)]

    def run_stage0() -> float:
        base.layers, base.norm = torch.nn.ModuleList(layers[:1]), torch.nn.Identity()
        tracker = StorageTracker([*existing, *ids])
        with tracker:
            outs = [base(input_ids=i, use_cache=False).last_hidden_state for i in ids]  # two micro-batches in flight
            for out in outs:  # each comes back with the gradient stage 1 sends
                out.backward(torch.randn_like(out))
        params = sum(p.numel() for p in (*base.embed_tokens.parameters(), *layers[0].parameters()))
        return max(tracker.bytes(alive) for alive in tracker.timeline) + RECIPE_BYTES * params

    def run_stage1(norm) -> float:
        base.layers, base.norm, base.embed_tokens = torch.nn.ModuleList(layers[1:]), norm, None
        received = torch.randn(1, S, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
        tracker = StorageTracker([*existing, *ids, received])
        with tracker:
            model(inputs_embeds=received, labels=ids[0], use_cache=False).loss.backward()
        params = sum(p.numel() for p in (*layers[1].parameters(), *norm.parameters(), *model.lm_head.parameters()))
        # the received activation: the p2p buffer the stage's first layer reads, kept while it may
        return max(tracker.bytes(alive) for alive in tracker.timeline) + received.untyped_storage().nbytes() + RECIPE_BYTES * params

    norm = base.norm
    peaks = [run_stage0()]
    gc.collect()
    peaks.append(run_stage1(norm))
    return peaks




@pytest.mark.parametrize("repo", sorted(MODELS))
def test_fits_total_is_the_fullest_stages_peak(repo, tmp_path, capsys):
    config = tiny_config(repo)
    row = two_stage_fit(config, tmp_path, capsys)
    peaks = stage_peaks(config)
    assert row["stage"] == max(range(2), key=lambda i: peaks[i]) == 1
    unpriced = 2 * S * HEAD_DIM * 2 + S * WIDTH * 2  # rotary cos and sin; the received activation
    assert peaks[1] - unpriced <= row["total"] <= peaks[1], (row, peaks)
    assert row["total"] / peaks[1] > 0.98
