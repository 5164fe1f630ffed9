"""The measured column (docs/census.md, "Measured bytes") on a tiny Llama-shaped config, derived by hand from the shapes;
the census leaves the process as it found it."""

from __future__ import annotations

import pytest
import torch

from speccat.catalogue.vocabulary import OPS, UNPRICED_OPS
from speccat.census.spec import SpecError

# hidden 64, 4 heads of 16, 2 kv heads, MLP width 128; bf16 activations; 64 tokens.
H, HEADS, KV, D, W, S = 64, 4, 2, 16, 128, 64
TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": H,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV,
    "head_dim": D,
    "intermediate_size": W,
    "num_hidden_layers": 2,
    "vocab_size": 256,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}
BF16, FP32 = 2, 4

# What autograd keeps per token, op by op (storages counted once, parameters, the layer's input
# and its output left out):
EXPECTED = {
    # Each RMSNorm keeps its input upcast to fp32 (pow and mul save it: one storage, 4h), the fp32
    # rsqrt of the mean square (one number per token), and the normalised input cast back to bf16
    # (saved by `weight * x`, 2h). Two norms per layer.
    "normOp": 2 * (FP32 * H + FP32 + BF16 * H),
    # q_proj/k_proj/v_proj save their shared input, the first norm's output (bf16, h).
    "attMM": BF16 * H,
    # The flash kernel keeps its inputs: q (4 heads), k and v (2 kv heads, unexpanded)...
    "attBMM": BF16 * (HEADS * D + KV * D + KV * D),
    # ...and its own outputs: the output (4 heads) and one fp32 log-sum-exp per head.
    "softmax": BF16 * HEADS * D + FP32 * HEADS,
    # gate_proj/up_proj save the second norm's output (h); the product act(gate) * up saves both
    # factors (w each); down_proj saves the product (w).
    "ffMM": BF16 * (H + W + W + W),
    # SiLU saves its input, the gate projection's output (w).
    "ffAct": BF16 * W,
}


@pytest.fixture(scope="module")
def tiny_spec():
    from speccat.census import run_census

    return run_census(TINY_LLAMA, name="tiny-llama", seq_length=S)


def test_measured_bytes_per_op_match_the_hand_derivation(tiny_spec):
    measured = tiny_spec["measured"]["decoder"]
    assert measured["seq_length"] == S
    assert measured["attention_impl"] == "speccat::flash_attention"
    assert "experts_impl" not in measured
    expected = {op: float(EXPECTED.get(op, 0)) for op in OPS + UNPRICED_OPS}
    assert measured["bytes_per_token"] == expected


def test_measured_bytes_sum_to_everything_the_layer_saved():
    """The per-op bytes add up to an independent count of every storage the layer saved."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    from speccat.census import run_census
    from speccat.census.kernels.attention import ATTENTION_IMPL

    spec = run_census(TINY_LLAMA, name="tiny-llama", seq_length=S)
    census_total = sum(spec["measured"]["decoder"]["bytes_per_token"].values()) * S

    config = LlamaConfig(**{k: v for k, v in TINY_LLAMA.items() if k != "model_type"})
    config._attn_implementation = ATTENTION_IMPL
    storages = {}
    default_dtype = torch.get_default_dtype()
    with FakeTensorMode():
        torch.set_default_dtype(torch.bfloat16)  # .to(bfloat16) cannot swap fake parameters
        try:
            layer = LlamaDecoderLayer(config, 0)
            rotary = LlamaRotaryEmbedding(config)
        finally:
            torch.set_default_dtype(default_dtype)
        x = torch.empty(1, S, H, dtype=torch.bfloat16, requires_grad=True)
        cos_sin = rotary(x, torch.arange(S).unsqueeze(0))
        params = {p.untyped_storage()._cdata for p in layer.parameters()}
        inputs = {x.untyped_storage()._cdata} | {t.untyped_storage()._cdata for t in cos_sin}

        def pack(t):
            key = t.untyped_storage()._cdata
            if key not in params and key not in inputs:
                storages[key] = (t, t.untyped_storage().nbytes())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = layer(x, position_embeddings=cos_sin)
        out_key = out.untyped_storage()._cdata
    independent_total = sum(n for key, (_, n) in storages.items() if key != out_key)
    assert census_total == independent_total == sum(EXPECTED.values()) * S


def test_census_twice_gives_identical_bytes(tiny_spec):
    from speccat.census import run_census

    again = run_census(TINY_LLAMA, name="tiny-llama", seq_length=S)
    assert again == tiny_spec


def test_bytes_per_token_do_not_depend_on_the_sequence_length(tiny_spec):
    # Flash attention keeps nothing s×s: every saved tensor grows linearly with the tokens.
    from speccat.census import run_census

    longer = run_census(TINY_LLAMA, name="tiny-llama", seq_length=4 * S)
    assert longer["measured"]["decoder"]["bytes_per_token"] == tiny_spec["measured"]["decoder"]["bytes_per_token"]


def _process_state():
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    from transformers.models.qwen3_next import modeling_qwen3_next

    return {
        "default_dtype": torch.get_default_dtype(),
        "dispatch_modes": len(_get_current_dispatch_mode_stack()),
        "saved_tensor_hooks": torch._C._autograd._top_saved_tensors_default_hooks(False),
        "grad_enabled": torch.is_grad_enabled(),
        "delta_rule": modeling_qwen3_next.torch_chunk_gated_delta_rule,
    }


def test_census_leaves_the_process_as_it_found_it(monkeypatch):
    from speccat.census import run_census
    from speccat.census.kernels import attention

    before = _process_state()
    hybrid = {
        "model_type": "qwen3_next",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "vocab_size": 256,
        "layer_types": ["linear_attention", "full_attention"],
    }
    spec = run_census(hybrid, name="tiny-hybrid", seq_length=S)
    assert [g["kind"] for g in spec["layers"]] == ["linear_attention", "full_attention"]
    assert _process_state() == before
    # A census that fails inside the run (here in the full-attention layer, after the linear one
    # ran with the swapped delta rule) restores everything too, and names the exception.
    def broken_kernel(*args, **kwargs):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(attention, "flash_attention", broken_kernel)
    with pytest.raises(SpecError) as err:
        run_census(hybrid, name="tiny-hybrid", seq_length=S)
    assert err.value.reason == "census_failed" and "RuntimeError: kernel exploded" in str(err.value)
    assert _process_state() == before


def test_measured_across_settings_match_the_hand_derivation():
    """The points of census/across.yaml on the tiny Llama, each derived by hand from the shapes."""
    from speccat.census import run_census

    spec = run_census(TINY_LLAMA, name="tiny-llama", seq_length=S, across=True)
    points = {p["point"]: (p, sum(p["bytes_per_token"]["decoder"].values())) for p in spec["measured_at"]}
    total = sum(EXPECTED.values())
    # Half the tokens: the same bytes per token (nothing grows with s under flash).
    assert points[f"seq {S // 2}"][1] == total
    # A cp 2 rank keeps half of every tensor: per token of the whole sequence, half.
    assert points["cp 2"][0]["cp"] == 2 and points["cp 2"][1] == total / 2
    # A tp 2 rank: 2 heads, 1 kv head, MLP width 64; the norms, their outputs (the projections'
    # inputs) kept whole (sequence parallelism off).
    heads, kv, w = HEADS // 2, KV // 2, W // 2
    tp2 = EXPECTED["normOp"] + BF16 * H + BF16 * (heads * D + kv * D + kv * D) + BF16 * heads * D + FP32 * heads + BF16 * (H + 3 * w) + BF16 * w
    assert points["tp 2"][0]["tp"] == 2 and points["tp 2"][1] == tp2
    # Through torch's selective-checkpoint API: recomputing the norms frees what they keep
    # (fp32 input, rstd, bf16 normalised input: 6h + 4 per norm); recomputing everything
    # leaves the projections' inputs (attMM, ffMM).
    assert points["recompute normOp"][1] == total - 2 * (FP32 * H + FP32 + BF16 * H)
    assert points["recompute attBMM"][1] == total - EXPECTED["attBMM"]
    assert points["recompute headCast"][1] == total  # nothing kept for it
    assert points["recompute all"][1] == EXPECTED["attMM"] + EXPECTED["ffMM"]
    from speccat.catalogue.records.oprecords import load_records

    assert points["recompute all"][0]["recompute"] == list(load_records().switches)


def test_the_switch_sets_are_recomputed_in_one_forward_each_as_if_run_alone(monkeypatch):
    """All switch sets are counted from one selective-checkpoint forward; each set's bytes are
    what a forward under that set's own policy keeps."""
    from speccat.census import across, run_census
    from speccat.census.measure.recompute import probe_recomputed

    runs, compared = [], []

    def spy(built, indices, seq_length, plain, policies, encoder_tokens=0):
        runs.append(policies)
        together = probe_recomputed(built, indices, seq_length, plain, policies, encoder_tokens)
        for ops, probes in zip(policies, together, strict=True):
            alone = probe_recomputed(built, indices, seq_length, plain, [ops], encoder_tokens)[0]
            compared.append(({i: dict(p.saved_bytes) for i, p in probes.items()}, {i: dict(p.saved_bytes) for i, p in alone.items()}))
        return together

    monkeypatch.setattr(across, "probe_recomputed", spy)
    spec = run_census(TINY_LLAMA, name="tiny-llama", seq_length=S, across=True)
    assert len(runs) == 1 and len(runs[0]) > 2  # one forward for several distinct policies
    assert all(together == alone for together, alone in compared)
    recomputed = {p["point"] for p in spec["measured_at"] if p["recompute"]}
    assert {"recompute normOp", "recompute attBMM", "recompute all"} <= recomputed


def test_running_out_of_memory_in_a_rank_fails_the_census_not_the_rank(monkeypatch):
    """A rank transformers cannot build is skipped; a rank that ran out of memory is not: the
    census's memory budget is spent, and the night must report it as too large."""
    from speccat.census import across, run_census

    def exhausted(*configs):
        raise MemoryError("simulated: the census's address space is spent")

    monkeypatch.setattr(across, "build", exhausted)
    with pytest.raises(SpecError) as err:
        run_census(TINY_LLAMA, name="tiny-llama", seq_length=S, across=True)
    assert err.value.reason == "census_failed" and isinstance(err.value.__cause__, MemoryError)
