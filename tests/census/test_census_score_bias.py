"""An additive score bias (inkling's relative position bias; docs/census.md, "How a config becomes
a spec", step 4): what the census books for a tiny inkling_text layer against a real CPU forward
and backward of the same layer, storage by storage; its gradients against transformers' SDPA
path; the records' price of the kept bias, quadratic in the sequence.

inkling states `_supports_flash_attn = False`: on GPU, transformers trains it through torch SDPA
with a float mask carrying the bias (`create_position_bias_mask`), and with a bias that requires
grad SDPA runs its memory-efficient kernel, which keeps q, k, v, the bias, the output and the
fp32 log-sum-exp (torch's ScaledDotProductEfficientAttentionBackward0). The census's
`speccat::flash_attention` keeps the same with the bias as given. On CPU SDPA has no
memory-efficient kernel: a mask that requires grad sends it to the math path, which keeps fp32
copies and the probabilities instead; the test names each such storage.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from support.layer_runs import assert_same_grads, saves_and_grads, signature, tiny_model

from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.settings import load_settings
from speccat.census import run_census

BF16, FP32, I64 = 2, 4, 8
H, HEADS, KV, D, S = 64, 4, 2, 16, 32  # hidden, heads, kv heads, head dim, tokens
WINDOW, REL_EXTENT, D_REL = 8, 12, 4
TINY_INKLING = {
    "model_type": "inkling_text", "hidden_size": H, "num_hidden_layers": 2, "num_attention_heads": HEADS,
    "num_key_value_heads": KV, "head_dim": D, "swa_num_attention_heads": HEADS, "swa_num_key_value_heads": KV,
    "swa_head_dim": D, "sliding_window_size": WINDOW, "d_rel": D_REL, "rel_extent": REL_EXTENT, "conv_kernel_size": 3,
    "mlp_layer_types": ["dense", "dense"], "intermediate_size": 128, "layer_types": ["hybrid_sliding", "hybrid"],
    "vocab_size": 128, "torch_dtype": "bfloat16",
}  # fmt: skip
KINDS = {0: "sliding_dense", 1: "full_dense"}


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY_INKLING, name="tiny-inkling", seq_length=S)


def _layer_run(impl: str, index: int, dtype: torch.dtype):
    """A real forward and backward of layer `index` through attention `impl`, given the mask the
    model makes for it: causal, and within the window in the sliding layer (0)."""
    model = tiny_model(TINY_INKLING, dtype)
    model.config._attn_implementation = impl
    x = torch.randn(1, S, H, dtype=dtype, generator=torch.Generator().manual_seed(1), requires_grad=True)
    distance = torch.arange(S)[:, None] - torch.arange(S)[None, :]
    mask = ((distance >= 0) & ((distance < WINDOW) if index == 0 else True)).view(1, 1, S, S)
    return saves_and_grads(model, model.model.layers[index], x, attention_mask=mask)


@pytest.mark.parametrize("index", [0, 1])
def test_an_inkling_layer_books_what_a_real_run_keeps_storage_by_storage(spec, index):
    kept, _ = _layer_run("speccat", index, torch.bfloat16)
    ours = Counter(signature(kept.values()))
    booked = spec["measured"][KINDS[index]]["bytes_per_token"]
    assert sum(booked.values()) * S == sum(n for (_, _, n), count in ours.items() for _ in range(count))
    # the kernel keeps q, k and v (kv heads unexpanded), the output, the fp32 log-sum-exp and the bias as given
    bias = ((1, HEADS, S, S), torch.bfloat16, BF16 * HEADS * S * S)
    kernel = [((1, HEADS, S, D), torch.bfloat16, BF16 * HEADS * S * D), *[((1, KV, S, D), torch.bfloat16, BF16 * KV * S * D)] * 2]
    assert all(ours[row] >= 1 for row in [*kernel, bias, ((1, S, HEADS, D), torch.bfloat16, BF16 * S * HEADS * D), ((1, HEADS, S), torch.float32, FP32 * HEADS * S)])
    assert booked["attBMM"] * S == sum(n for *_, n in kernel) + bias[2]
    # the bias's construction, as it runs: the gather keeps its source (heads × the distances
    # the layer's table holds: the window in a sliding layer, rel_extent in a full one) and its
    # int64 index, and masked_fill its bool mask; index and mask are s × t, shared by batch and heads
    extent = WINDOW if index == 0 else REL_EXTENT
    assert ours[((1, HEADS, S, extent), torch.bfloat16, BF16 * HEADS * S * extent)] == 1
    assert ours[((1, HEADS, S, S), torch.int64, I64 * S * S)] == 1
    assert ours[((1, 1, S, S), torch.bool, S * S)] == 1


@pytest.mark.parametrize("index", [0, 1])
def test_cpu_sdpa_keeps_the_same_but_for_its_math_fallback(index):
    """transformers' SDPA path on CPU against the census's kernel: every storage the same but
    the attention's own. SDPA on CPU has no memory-efficient kernel; with a mask that requires
    grad it runs the math path: bf16 upcast to fp32 (q scaled, k and v expanded to every head,
    b·h merged), the fp32 probabilities, and o_proj's copy of the (b, h, s, d) output made
    contiguous, where the GPU kernel keeps q, k, v, its (b, s, h, d) output, the fp32 lse and
    the bias. The where that folds the bias into the mask keeps the model's mask (a layer input
    here, left out)."""
    ours = Counter(signature(_layer_run("speccat", index, torch.bfloat16)[0].values()))
    sdpa = Counter(signature(_layer_run("sdpa", index, torch.bfloat16)[0].values()))
    bf16, f32 = torch.bfloat16, torch.float32
    assert sorted((ours - sdpa).elements(), key=str) == sorted(
        [
            ((1, HEADS, S, D), bf16, BF16 * HEADS * S * D),
            ((1, KV, S, D), bf16, BF16 * KV * S * D),
            ((1, KV, S, D), bf16, BF16 * KV * S * D),
            ((1, S, HEADS, D), bf16, BF16 * S * HEADS * D),
            ((1, HEADS, S), f32, FP32 * HEADS * S),
            ((1, HEADS, S, S), bf16, BF16 * HEADS * S * S),
        ],
        key=str,
    )
    assert sorted((sdpa - ours).elements(), key=str) == sorted(
        [
            ((HEADS, S, D), f32, FP32 * HEADS * S * D),
            ((HEADS, D, S), f32, FP32 * HEADS * S * D),
            ((HEADS, S, D), f32, FP32 * HEADS * S * D),
            ((1, HEADS, S, S), f32, FP32 * HEADS * S * S),
            ((S, HEADS * D), bf16, BF16 * S * HEADS * D),
        ],
        key=str,
    )


@pytest.mark.parametrize("index", [0, 1])
def test_the_kernel_gives_the_bias_the_gradient_sdpa_gives_it(index):
    """In fp32, every parameter's gradient and the input's through the census's kernel equal
    those through transformers' SDPA path: r_proj's and the bias table's only reach the loss
    through the bias's gradient."""
    _, ours = _layer_run("speccat", index, torch.float32)
    _, sdpa = _layer_run("sdpa", index, torch.float32)
    assert ours["self_attn.rel_logits_proj.proj"].abs().sum() > 0
    assert_same_grads(ours, sdpa)


def test_an_inkling_kind_states_its_bias_and_what_builds_it(spec):
    for index, kind in KINDS.items():
        facts = spec["variants"][kind]
        assert spec["measured"][kind]["attention_impl"] == "speccat::flash_attention"
        assert facts["score_bias_bytes"] == BF16
        # the gathered table: one bf16 per head and distance (the window, or rel_extent)
        assert facts["score_bias_source"] == BF16 * (WINDOW if index == 0 else REL_EXTENT)
        assert facts["score_bias_tables"] == I64 + 1  # the gather's index and the bool mask
        # fp32 short convs: on k and v (kv width each), on the attention's and the MLP's outputs (hidden width each)
        assert facts["attention_conv_bytes"] == FP32 * 2 * KV * D
        assert facts["stream_conv_bytes"] == FP32 * 2 * H


@pytest.mark.parametrize("seq", [S, 2 * S])
def test_the_records_price_the_kept_bias_quadratic_in_the_sequence(seq):
    """The kernel's saves (attBMM: q, k, v and the bias, a·s per token) priced as measured at two
    lengths, per token the bias growing with the sequence; the whole attention priced as measured,
    r_proj's output among it, which the product with the distance profiles keeps (a·d_rel bf16 per
    token: attn_head_half, d_rel per head, census/measure/head_rows.py)."""
    spec = run_census(TINY_INKLING, name="tiny-inkling", seq_length=seq)
    records, grid = load_records(), load_settings()
    one = grid.with_settings([grid.setting({"seq_length": seq, "attention_kernel": "flash"})])  # the census's kernel
    prices = price_layers(spec, records, one)
    kept_all, attbmm_dropped = records.mask_of([]), records.mask_of(["attBMM"])
    for i, kind in enumerate(prices.kinds):
        booked = spec["measured"][kind]["bytes_per_token"]
        assert booked["attBMM"] == BF16 * (HEADS + 2 * KV) * D + BF16 * HEADS * seq
        # recomputing attBMM drops exactly what the census booked to it
        priced_attbmm = float(prices.total[i, 0, kept_all] - prices.total[i, 0, attbmm_dropped]) / seq
        assert priced_attbmm == pytest.approx(booked["attBMM"], rel=1e-9), kind
        attention = float(prices.part("attention")[i, 0, kept_all]) / seq
        measured = booked["attMM"] + booked["attBMM"] + booked["softmax"]
        assert spec["variants"][kind]["attn_head_half"] == D_REL
        assert attention == pytest.approx(measured, rel=1e-9), kind
