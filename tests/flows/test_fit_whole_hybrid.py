"""`speccat fit`'s total against a real training step's peak for a hybrid, as
tests/flows/test_fit_whole_step.py checks a dense and an MoE model: the tiny Qwen3-Next of
tests/support/tiny_models.py (HYBRID: layers 0-2 gated delta-rule linear attention, layer 3 full
attention, every layer a MoE with a gated shared expert), bf16 on CPU, cut into two pipeline
stages as fit cuts four layers (two each) and run as Megatron-LM's 1F1B runs them on 2 ranks.
Stage 0 (the embedding, layers 0 and 1) takes two micro-batches forward before the first comes
back; as Megatron-LM does (deallocate_pipeline_outputs, which its training sets), the data of
each output is freed once sent and the backward is run on the output's graph by the autograd
engine itself (custom_backward), with the gradient stage 1 sends. Stage 1 (layers 2 and 3, the
final norm, the head and the loss) runs one, from a received activation. The linear attention
runs the census's kernel stand-ins (census/measure/kernel_stand_ins.py `kernels_swapped`: the
causal conv1d and the chunked gated delta rule as the custom ops whose CPU implementations
compute them on the real tensors and keep what the CUDA kernels keep), not transformers' torch
fallbacks, so the step keeps what the census prices (tests/census/test_whole_hybrid.py). Each
stage's peak is the most bytes alive at any moment of its forwards and backwards
(tests/support/storage_tracker.py: the parameters and their gradient buffers left out, the ids
the embeddings' backward keeps counted), plus 18 bytes a parameter of model states as fit's
default recipe holds them, counted from the stage's own parameters.

Each stage's peak is counted as a run without the tracker holds it (PlainIndexPut: under a
dispatch mode torch fills the index's zeros out of place, as the census corrects too).

Here the fullest stage is the first, with two micro-batches of two MoE layers in flight, and
fit names it. Its total is the measured peak less exactly the per-layer constants fit does not
price (per layer and micro-batch, not per token; tests/census/test_whole_hybrid.py): the
RMSNorms' fp32 `1 + weight` (two of h), the decay's fp32 exp(A_log) and its negation (one per
value head each) and the grouped matmul's offsets (one int32 per expert). The peak is in layer
1's MoE backward (the gather back to token order being differentiated), and the total holds it
whole: the remade saves (none here), the gradient stage 1 sent back and the layer's working set
(the per-slot output gradients, the shared expert's, less the gate's saves freed), which the
records price from the census's statement of that moment.
"""

from __future__ import annotations

import gc

import torch
from support.storage_tracker import PlainIndexPut, StorageTracker
from support.tiny_models import HYBRID, S, VOCAB, WIDTH, one_thread, tiny_config, two_stage_fit
from torch.autograd import Variable
from transformers import AutoConfig, AutoModelForCausalLM

import speccat.census.kernels  # noqa: F401  every kernel's record registered (kernels_swapped reads them)
from speccat.census.measure.kernel_stand_ins import kernels_swapped

RECIPE_BYTES = 18  # bytes a parameter: states.yaml's default recipe at dp 1
(QWEN3_NEXT,) = HYBRID
CUT = 2  # fit's pieces of four layers on two stages: [0, 2) and [2, 4)


def stage_peaks(config: dict) -> list[float]:
    """Each stage's measured peak, model states included."""
    hub = AutoConfig.for_model(**{k: v for k, v in config.items() if k != "architectures"})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hub, dtype=torch.bfloat16, attn_implementation="sdpa").train()
    assert hub.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    base, layers = model.model, list(model.model.layers)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # the buffer each step sums into, part of the model states
    stub = torch.empty(1, dtype=torch.bfloat16)  # what a sent output's data is replaced by
    existing = [*model.parameters(), *model.buffers(), *(p.grad for p in model.parameters()), stub]
    ids = [torch.randint(0, VOCAB, (1, S)) for _ in range(2)]
    ids_bytes = sum(i.untyped_storage().nbytes() for i in ids)

    def run_stage0() -> float:
        base.layers, base.norm = torch.nn.ModuleList(layers[:CUT]), torch.nn.Identity()
        tracker = PlainIndexPut([*existing, *ids])
        with tracker:
            outs = []
            for i in ids:  # two micro-batches in flight
                out = base(input_ids=i, use_cache=False).last_hidden_state
                out.data = stub  # Megatron-LM's deallocate_output_tensor, once sent
                outs.append(out)
            for out in outs:  # each comes back with the gradient stage 1 sends
                grad = torch.randn(1, S, WIDTH, dtype=torch.bfloat16)
                Variable._execution_engine.run_backward(  # Megatron-LM's custom_backward: no shape check
                    tensors=(out,), grad_tensors=(grad,), keep_graph=False, create_graph=False, inputs=(), allow_unreachable=True, accumulate_grad=True
                )
                del grad
        params = sum(p.numel() for p in (*base.embed_tokens.parameters(), *(q for layer in layers[:CUT] for q in layer.parameters())))
        assert tracker.filled  # the experts' gather back to token order
        return max(tracker.plain_bytes(alive) for alive in tracker.timeline) + ids_bytes + RECIPE_BYTES * params

    def run_stage1(norm) -> float:
        base.layers, base.norm, base.embed_tokens = torch.nn.ModuleList(layers[CUT:]), norm, None
        received = torch.randn(1, S, WIDTH, dtype=torch.bfloat16, requires_grad=True)
        tracker = StorageTracker([*existing, *ids, received])
        with tracker:
            model(inputs_embeds=received, labels=ids[0], use_cache=False).loss.backward()
        params = sum(p.numel() for p in (*(q for layer in layers[CUT:] for q in layer.parameters()), *norm.parameters(), *model.lm_head.parameters()))
        # the received activation: the p2p buffer the stage's first layer reads, kept while it may
        return max(tracker.bytes(alive) for alive in tracker.timeline) + received.untyped_storage().nbytes() + RECIPE_BYTES * params

    norm = base.norm
    with kernels_swapped(dict(enumerate(layers))), one_thread():
        peak0 = run_stage0()
        gc.collect()
        return [peak0, run_stage1(norm)]


def test_fits_total_is_the_hybrids_fullest_stage_peak_less_a_layers_backward(tmp_path, capsys):
    config = tiny_config(QWEN3_NEXT)
    row = two_stage_fit(config, tmp_path, capsys)
    peaks = stage_peaks(config)
    assert row["stage"] == max(range(2), key=lambda i: peaks[i]) == 0
    v_heads, in_flight = config["linear_num_value_heads"], 2
    # per layer and micro-batch in flight: two norms' weight copies, the decay's two fp32 tensors, the offsets
    per_layer = CUT * in_flight * (2 * WIDTH * 4 + 2 * v_heads * 4 + config["num_experts"] * 4)
    assert row["remade"] == 0 and row["backward"] > S * WIDTH * 2  # the gradient received, and the working set on it
    assert row["total"] == peaks[0] - per_layer, (row, peaks)
