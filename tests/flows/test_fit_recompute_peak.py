"""`speccat fit`'s total under full recompute against a real step's peak: a tiny Llama
(tests/support/tiny_models.py, a vocabulary of 64 so that the loss's working set is the
smaller) on one rank, bf16 on CPU, each layer run inside torch's non-reentrant checkpoint, one
forward with labels and its backward, every storage counted (tests/support/storage_tracker.py;
the parameters left out, their fp32 gradient buffers and optimizer states counted as fit's
default recipe holds them, 18 bytes a parameter at dp 1).

Each layer keeps only its input; its backward first remakes every save of the layer, then forms
its gradients. fit's total holds the layers' inputs, the ends, the model states and, of the
loss's moment and a layer's backward, the larger: there, one layer's backward beyond its saves
(backward_bytes: the remade saves, the layer's price with nothing recomputed, and the working
set the records price from the census's, the gradient the layer receives among it), less the
head's tensors, which that micro-batch's head backward has freed. Without the remade saves the
total held a third of the real activation peak. Now it falls short by exactly two tensors no
records term prices: the rotary cos and sin (known gaps) and the loss's shifted targets
(transformers pads the labels by one: S + 1 int64s).
"""
from __future__ import annotations

import json

import torch
from support.storage_tracker import StorageTracker
from support.tiny_models import HEAD_DIM, S, tiny_config
from torch.utils.checkpoint import checkpoint
from transformers import AutoConfig, AutoModelForCausalLM

from speccat.census import run_census
from speccat.flows.cli import main

VOCAB = 64
RECIPE_BYTES = 18  # states.yaml's default recipe at dp 1


def config() -> dict:
    return {**tiny_config("meta-llama/Llama-3.1-8B-Instruct"), "vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2}


def measured_peak(cfg: dict) -> tuple[int, int]:
    """The most bytes alive at once in the step, the ids the embedding keeps included, and the
    parameters; the backward runs to the embedding's output, the weights' own gradients not
    asked for (as the census's backward peak is measured)."""
    hub = AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "architectures"})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hub, dtype=torch.bfloat16, attn_implementation="sdpa").train()
    model.activation_checkpointing_enable({"use_reentrant": False})
    ids = torch.randint(0, VOCAB, (1, S))
    tracker = StorageTracker([*model.parameters(), *model.buffers(), ids])
    with tracker:
        embeds = model.model.embed_tokens(ids)
        model(inputs_embeds=embeds, labels=ids, use_cache=False).loss.backward(inputs=[embeds])
    params = sum(p.numel() for p in model.parameters())
    return max(tracker.bytes(alive) for alive in tracker.timeline) + ids.untyped_storage().nbytes(), params


def test_full_recompute_total_is_the_real_peak_less_two_unpriced_tensors(tmp_path, capsys):
    cfg = config()
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    argv = ["fit", str(tmp_path), "--seq", str(S), "--gpus", "1", "--zero", "0", "--gpu-mem", "1000GiB", "--json", "--top", "0"]
    assert main(argv) == 0
    rows = {r["switch_set"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    full, none = rows["full"], rows["none"]
    peak, params = measured_peak(cfg)
    spec = run_census(cfg, name="tiny", seq_length=S).to_dict()
    working = spec["measured"]["decoder"]["backward_peak"]
    assert full["remade"] > full["loss_working"] and none["remade"] == 0
    states = RECIPE_BYTES * params
    assert full["weight"] + full["grad"] + full["optimizer"] == states
    priced, real = full["total"] - states, peak
    rotary, targets = 2 * S * HEAD_DIM * 2, (S + 1) * 8
    assert real - priced == rotary + targets  # 98.0% of the real peak
    assert full["backward"] == full["remade"] + working  # the working set priced at the census's own setting is what it measured
    assert (priced - full["backward"] + full["loss_working"]) < 0.4 * real  # what the total held without the backward's term
