"""A whole model's saves against the sum of its prices: a tiny Llama (dense), a tiny Qwen3 MoE and
a tiny GPT-2 (LayerNorms that keep their input, learned positions), built from the shipped
configs at width 128, run forward with labels as a training step runs it (no key-value cache) on
real CPU tensors in bf16, and every storage autograd keeps counted
(tests/support/storage_tracker.py). The sum the
planner adds for one rank holding the whole stack is its layers × their kind's price, nothing
recomputed, plus the three ends (catalogue/records/ends.yaml): the embedding's ids, the final
norm and the logits with transformers' own loss.

The two agree but for one tensor pair, stated here so that a change on either side shows: the
rotary position embedding's cos and sin (s × head_dim each, bf16), made once by the model and
kept by every layer's rotary products, which neither a layer's price (the census probes layers
given them) nor the ends hold. At Llama-3.1-8B's 8,192 tokens they are 4 MiB a micro-batch. The
MoE layers also keep their grouped matmul's offsets, one int32 per expert (8 here), which a
price per token leaves out.
GPT-2 differs by two others: its learned positions' ids (s int64), which its position
embedding's backward keeps and no end prices, and its LayerNorms' mean and rstd, priced at their
CUDA width (fp32) where the CPU kernel keeps bf16 (five LayerNorms, two statistics each).
The embedding's output is not counted twice: it is the first layer's input, which Llama's
RMSNorm does not keep (it keeps an fp32 copy, in the layer's price) and GPT-2's LayerNorm does
(in the layer's price), and the ends no longer count it."""

from __future__ import annotations

import gc

import pytest
import torch
from support.storage_tracker import StorageTracker
from conftest import load_shipped
from support.tiny_models import HEAD_DIM, MODELS, S, VOCAB, priced, tiny_config
from transformers import AutoConfig, AutoModelForCausalLM

GPT2 = "openai-community/gpt2"
GPT2_TINY = dict(n_embd=128, n_layer=2, n_head=4, vocab_size=VOCAB, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)


def config_of(repo: str) -> dict:
    return {**load_shipped(repo), **GPT2_TINY} if repo == GPT2 else tiny_config(repo)


def measured(config: dict) -> tuple[int, list]:
    """Bytes autograd keeps after one forward with labels, the ids included; the shapes kept."""
    hub = AutoConfig.for_model(**{k: v for k, v in config.items() if k != "architectures"})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hub, dtype=torch.bfloat16, attn_implementation="sdpa").train()
    ids = torch.randint(0, VOCAB, (1, S))
    tracker = StorageTracker([*model.parameters(), *model.buffers(), ids])
    with tracker:
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    gc.collect()
    kept = tracker.alive() - {tracker.serial(loss)}
    # the ids were made outside the watch, and the embedding's backward keeps them
    return tracker.bytes(kept) + ids.untyped_storage().nbytes(), [tracker.shape[i] for i in kept]


@pytest.mark.parametrize("repo", sorted(MODELS))
def test_the_whole_model_keeps_its_prices_and_the_rotary_tables(repo):
    config = config_of(repo)
    got, shapes = measured(config)
    rotary = 2 * S * HEAD_DIM * 2  # cos and sin, bf16
    offsets = config["num_hidden_layers"] * config.get("num_experts", 0) * 4
    assert shapes.count((1, S, HEAD_DIM)) == 2 and shapes.count((config.get("num_experts", -1),)) == (2 if offsets else 0)
    assert got == priced(config) + rotary + offsets


def test_gpt2_keeps_its_prices_and_its_position_ids():
    config = config_of(GPT2)
    got, shapes = measured(config)
    position_ids = S * 8
    stats_at_cuda_width = 5 * 2 * S * (4 - 2)  # two blocks' two LayerNorms and the final one
    assert shapes.count((S,)) == 1 and shapes.count((1, S, 1)) == 10
    assert got == priced(config) + position_ids - stats_at_cuda_width
