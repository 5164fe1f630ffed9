"""One layer of a tiny model run forward and backward on real CPU tensors, bf16, sdpa: the most
bytes alive in its backward beyond those alive before it began, the gradient it receives counted
in, storage by storage (PlainIndexPut: the index's zeros counted as a plain run fills them),
the backward run to the layer's input only (the weights' own gradients not asked for), as the
census measures a kind's backward peak (census/measure/backward_peak.py)."""

from __future__ import annotations

import torch
from support.storage_tracker import PlainIndexPut
from support.tiny_models import S
from torch.utils.checkpoint import checkpoint
from transformers import AutoConfig, AutoModelForCausalLM

from speccat.census.describe.feed_forward_facts import EXPERTS_IMPL


def real_peak(config: dict, recompute: bool = False, seq: int = S) -> int:
    """Layer 0 of the model run forward and backward on real tensors: the most bytes alive in its
    backward beyond those alive before it began (the gradient it receives counted in), at `seq` tokens."""
    hub = AutoConfig.for_model(**{k: v for k, v in config.items() if k != "architectures"})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hub, dtype=torch.bfloat16, attn_implementation="sdpa").train()
    if config.get("num_experts"):
        model.set_experts_implementation(EXPERTS_IMPL)
    layer = model.model.layers[0]
    x = torch.randn(1, seq, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    position_ids = torch.arange(seq)[None]
    rotary = model.model.rotary_emb(x, position_ids)

    def forward(hidden):
        out = layer(hidden, attention_mask=None, position_ids=position_ids, position_embeddings=rotary)
        return out[0] if isinstance(out, tuple) else out

    tracker = PlainIndexPut([x, *model.parameters(), *model.buffers(), *rotary])
    with tracker:
        y = checkpoint(forward, x, use_reentrant=False) if recompute else forward(x)
        start = tracker.bytes(tracker.alive())
        grad = torch.ones_like(y)
        before = len(tracker.timeline)
        torch.autograd.backward(y, grad, inputs=[x])
    assert bool(tracker.filled) == bool(config.get("num_experts"))  # the experts' gather back to token order
    return max(tracker.plain_bytes(alive) for alive in tracker.timeline[before:]) - start
