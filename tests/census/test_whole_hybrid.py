"""A hybrid's saves against the sum of its prices, as tests/census/test_whole_model.py checks a
dense and an MoE model: a tiny Qwen3-Next (tests/support/tiny_models.py HYBRID: three layers of
gated delta-rule linear attention, then one of full attention, the shipped
full_attention_interval 4; every layer a MoE with a gated shared expert), built from the shipped
config at width 128, run forward with labels as a training step runs it (no key-value cache) on
real CPU tensors in bf16, and every storage autograd keeps counted
(tests/support/storage_tracker.py). The census prices two kinds, linear_attention (3 layers) and
full_attention (1); the sum is their prices × their layers plus the three ends.

Like is compared with like: on CPU transformers runs its torch fallbacks for the linear
attention's causal conv1d and chunked gated delta rule, which keep other tensors than the CUDA
kernels training runs (causal-conv1d's, flash-linear-attention's chunk_gated_delta_rule), and
the census prices the kernels. So the model runs with the census's own stand-ins swapped in
over its layers (census/measure/kernel_stand_ins.py `kernels_swapped`, as the census's probe
does): `speccat::causal_conv1d` and `speccat::chunk_gated_delta_rule`, custom ops whose real CPU
implementations compute the convolution and the recurrence on the real tensors
(census/kernels/tensors.py, delta_math.py) and keep what the kernels keep. The full-attention
layer runs sdpa, as the dense and MoE runs do. The test checks the stand-ins ran and no
depthwise convolution ran in torch.

The two agree but for these tensors, stated here so that a change on either side shows:
- the rotary cos and sin (s × 8 each, bf16: the rotary covers a quarter of the 32-wide head),
  made once by the model and kept by the full-attention layer's rotary products, which neither a
  layer's price nor the ends hold (as for Llama);
- the grouped matmul's offsets, one int32 per expert in each MoE layer (as for Qwen3's MoE);
- per layer and call, not per token, so a price per token leaves them out: the fp32 `1 + weight`
  Qwen3-Next's RMSNorms keep, h wide for each layer's two norms on the stream and head_dim wide
  for the full-attention layer's q_norm and k_norm (the census states norm_weight_copy; ends.yaml
  prices the final norm's copy, the records' norm slot no layer's), and in each linear-attention
  layer the decay's fp32 exp(A_log), which exp's backward keeps, and its negation, which the
  product with the softplus keeps, one per value head each (the records' linear slot has no
  such term; the mamba and mamba2 slots price theirs).
"""

from __future__ import annotations

import gc

import torch
from support.storage_tracker import StorageTracker
from support.tiny_models import HEAD_DIM, HYBRID, S, VOCAB, WIDTH, one_thread, priced, tiny_config
from transformers import AutoConfig, AutoModelForCausalLM

import speccat.census.kernels  # noqa: F401  every kernel's record registered (kernels_swapped reads them)
from speccat.census.measure.kernel_stand_ins import kernels_swapped

(QWEN3_NEXT,) = HYBRID


class OpsTracker(StorageTracker):
    """A StorageTracker that also remembers which ops ran."""

    def __init__(self, existing):
        super().__init__(existing)
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func))
        return super().__torch_dispatch__(func, types, args, kwargs)


def measured(config: dict) -> tuple[int, list]:
    """Bytes autograd keeps after one forward with labels, the census's kernel stand-ins in place
    over the layers, the ids included; the shapes kept."""
    hub = AutoConfig.for_model(**{k: v for k, v in config.items() if k != "architectures"})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hub, dtype=torch.bfloat16, attn_implementation="sdpa").train()
    assert hub.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    ids = torch.randint(0, VOCAB, (1, S))
    tracker = OpsTracker([*model.parameters(), *model.buffers(), ids])
    with kernels_swapped(dict(enumerate(model.model.layers))), one_thread(), tracker:
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    gc.collect()
    kept = tracker.alive() - {tracker.serial(loss)}
    # the kernels ran as the census's stand-ins, and no depthwise convolution in torch
    assert {"speccat.chunk_gated_delta_rule.default", "speccat.causal_conv1d.default"} <= tracker.ops
    assert "aten.convolution.default" not in tracker.ops
    # the ids were made outside the watch, and the embedding's backward keeps them
    return tracker.bytes(kept) + ids.untyped_storage().nbytes(), [tracker.shape[i] for i in kept]


def test_the_hybrid_keeps_its_prices_the_rotary_tables_and_its_per_layer_constants():
    config = tiny_config(QWEN3_NEXT)
    got, shapes = measured(config)
    layers, linear, experts, v_heads = 4, 3, config["num_experts"], config["linear_num_value_heads"]
    rotary_dim = int(HEAD_DIM * config["partial_rotary_factor"])  # 8
    rotary = 2 * S * rotary_dim * 2  # cos and sin, bf16
    offsets = layers * experts * 4  # int32, one per expert and MoE layer
    norm_weights = layers * 2 * WIDTH * 4 + 2 * HEAD_DIM * 4  # fp32 1 + weight: two stream norms a layer; q_norm, k_norm
    decays = linear * 2 * v_heads * 4  # fp32 exp(A_log) and its negation, per linear-attention layer
    assert shapes.count((1, S, rotary_dim)) == 2 and shapes.count((experts,)) == layers
    # the final norm's copy is the ninth h-wide one: ends.yaml prices it
    assert shapes.count((WIDTH,)) == layers * 2 + 1 and shapes.count((HEAD_DIM,)) == 2 and shapes.count((v_heads,)) == linear * 2
    assert got == priced(config) + rotary + offsets + norm_weights + decays  # 10,800,652 priced, 12,768 beside
