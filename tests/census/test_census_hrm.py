"""A layer the decoder runs in several cycles (hrm_text: an L and an H stack of layers, the L stack
run L_cycles times in each of H_cycles, the earlier L cycles of each under torch.no_grad()): the
census counts the calls that ran with grad (`recurrent_cycles`), states one call's op counts and
facts, and measures what all those calls keep; the records price one call times the cycles. The
bytes by hand from the tiny config's dims, and against a real CPU forward and backward of the
whole decoder.
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import priced_vs_measured, tiny_model

from speccat.census import run_census

BF16, FP32 = 2, 4
H, HEADS, D, FF, S = 64, 4, 16, 128, 32  # hidden, heads, head dim, MLP width, tokens
TINY_HRM = {
    "model_type": "hrm_text", "hidden_size": H, "num_attention_heads": HEADS, "head_dim": D, "intermediate_size": FF,
    "num_hidden_layers": 2, "H_cycles": 2, "L_cycles": 3, "L_bp_cycles": [2], "vocab_size": 128, "prefix_lm": False,
    "max_position_embeddings": 256, "torch_dtype": "bfloat16",
}  # fmt: skip

# What one call of a layer keeps per token (bf16 compute, flash kernel):
ONE_CALL = {
    # the q/k/v/gate projections' input (the norm's bf16 output), the gate's sigmoid output and
    # the gated product o_proj reads (heads × head_dim each)
    "attMM": BF16 * (H + 2 * HEADS * D),
    # the kernel keeps q, k and v (multi-head: as many kv heads as heads)
    "attBMM": 3 * BF16 * HEADS * D,
    # its output and an fp32 log-sum-exp per head
    "softmax": BF16 * HEADS * D + FP32 * HEADS,
    # two weightless RMS norms that upcast: the fp32 input and an fp32 rstd each
    "normOp": 2 * (FP32 * H + FP32),
    # the MLP's input, the SiLU's output, up's output and the product down_proj reads
    "ffMM": BF16 * (H + 3 * FF),
    # the SiLU keeps its input (gate's output)
    "ffAct": BF16 * FF,
}


def _cycles_with_grad(config: dict) -> int:
    """The L cycles run with grad over the H cycles: transformers left-pads L_bp_cycles with 1s to
    H_cycles entries, one per H cycle (modeling_hrm_text.py, L_bp_cycles_padded)."""
    bp = list(config["L_bp_cycles"])
    return sum([1] * max(0, config["H_cycles"] - len(bp)) + bp)


def _real_l_layer_bytes(config: dict) -> int:
    """A real bf16 forward and backward of the whole tiny decoder on CPU, its attention through
    speccat's kernel: the bytes of the storages saved while the L stack's first layer ran (in any
    cycle), the parameters, buffers, the layer's inputs other than its hidden states (rotary
    tables, mask) and its outputs left out, as the census leaves them out."""
    from speccat.census.kernels.attention import ATTENTION_IMPL, register

    register()
    model = tiny_model({**config, "attn_implementation": ATTENTION_IMPL}, torch.bfloat16)
    decoder = model.model
    layer = decoder.L_module.layers[0]
    fixed = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
    # the tensors left out are held, so that no storage made later takes one's identity (the
    # cycles without grad free their outputs as the forward goes on)
    running, left_out, saved = [False], [], {}

    def pre(module, args, kwargs):
        running[0] = True
        left_out.extend(t for t in (*args[1:], *kwargs.values(), *(kwargs.get("position_embeddings") or ())) if isinstance(t, torch.Tensor))

    def post(module, args, kwargs, output):
        running[0] = False
        left_out.append(output)

    layer.register_forward_pre_hook(pre, with_kwargs=True)
    layer.register_forward_hook(post, with_kwargs=True)

    def pack(t):
        if running[0]:
            saved.setdefault(t.untyped_storage()._cdata, t)
        return t

    ids = torch.randint(0, 128, (1, S), generator=torch.Generator().manual_seed(1))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = decoder(input_ids=ids, use_cache=False).last_hidden_state
    out.float().square().sum().backward()
    left = fixed | {t.untyped_storage()._cdata for t in left_out}
    return sum(t.untyped_storage().nbytes() for key, t in saved.items() if key not in left)


@pytest.mark.parametrize(
    "cycles_config",
    [{}, {"L_cycles": 2, "L_bp_cycles": [2, 2]}],
    ids=["3 of 6 cycles with grad", "4 of 4 cycles with grad"],
)
def test_a_layer_run_in_cycles_keeps_each_cycle_with_grad(cycles_config):
    config = {**TINY_HRM, **cycles_config}
    cycles = _cycles_with_grad(config)
    assert cycles == (3 if not cycles_config else 4)
    spec = run_census(config, name="tiny-hrm", seq_length=S)
    (kind,) = spec["measured"]
    facts, ops = spec["variants"][kind], spec["ops"][kind]
    assert facts["recurrent_cycles"] == cycles
    # one call's counts and facts: the profile's, whatever the cycles
    assert {op: ops[op] for op in ("attMM", "attBMM", "softmax", "normOp", "headCast", "ffAct")} == {
        "attMM": 4, "attBMM": 2, "softmax": 1, "normOp": 2, "headCast": 1, "ffAct": 1,
    }  # fmt: skip
    assert (facts["act_saved"], facts["attn_gate_width"], facts["attn_gate_kept"]) == (1, D, D)
    measured = spec["measured"][kind]["bytes_per_token"]
    assert {op: measured[op] for op in ONE_CALL} == {op: cycles * n for op, n in ONE_CALL.items()}
    assert sum(measured.values()) * S == _real_l_layer_bytes(config)
    priced, got = priced_vs_measured(spec, S)[kind]
    assert priced == pytest.approx(got, rel=1e-9)


def test_a_layer_called_once_states_one_cycle():
    """An ordinary decoder's layers run once with grad: recurrent_cycles 1, the records' prices as before."""
    from transformers import CONFIG_MAPPING

    config = {
        **CONFIG_MAPPING["llama"]().to_dict(), "model_type": "llama", "hidden_size": H, "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS, "intermediate_size": FF, "num_hidden_layers": 2, "vocab_size": 128,
    }  # fmt: skip
    spec = run_census(config, name="tiny-llama", seq_length=S)
    (kind,) = spec["measured"]
    assert spec["variants"][kind]["recurrent_cycles"] == 1
    priced, got = priced_vs_measured(spec, S)[kind]
    assert priced == pytest.approx(got, rel=0.02)
