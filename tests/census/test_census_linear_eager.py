"""A linear attention written in torch (minimax's lightning attention; docs/census.md, "Linear
attention run in torch"): what the census books for one such layer against a real CPU forward and
backward of the same layer, storage by storage; its kinds, counts and facts; priced against
measured, with its blocks as s×s scores (one block) and as blocks of fewer rows.

No production kernel stands behind this code (transformers ships none for it), so the census
runs it as written, with autograd, on fake tensors; the real run is the same code on real
tensors. They differ by what no output reaches: the last block's state update (k times its
decay, and the block decay), which a real run's saved-tensor hook sees but backward never reads.
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import priced_vs_measured, saves_and_grads, signature, tiny_model

from speccat.census import run_census

BF16, FP32 = 2, 4
H, A, D, BLOCK, S = 64, 4, 16, 8, 32  # hidden, heads, head width, the attention's block, tokens
BLOCKS = S // BLOCK
TINY_MINIMAX = {
    "model_type": "minimax", "hidden_size": H, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": A,
    "num_key_value_heads": 2, "head_dim": D, "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 128,
    "layer_types": ["full_attention", "linear_attention"], "block_size": BLOCK, "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}  # fmt: skip
KIND = "linear_eager_moe"


@pytest.fixture(scope="module")
def spec():
    return run_census(TINY_MINIMAX, name="tiny-minimax", seq_length=S)


def _attention_saves():
    """A real bf16 forward and backward of the linear attention of layer 1, alone."""
    model = tiny_model(TINY_MINIMAX, torch.bfloat16)
    x = torch.randn(1, S, H, dtype=torch.bfloat16, requires_grad=True)
    kept, _ = saves_and_grads(model, model.model.layers[1].self_attn, x, position_embeddings=None, attention_mask=None)
    return signature(kept.values())


def test_a_linear_attention_books_what_its_torch_code_keeps_storage_by_storage(spec):
    real = _attention_saves()
    f32, bf16 = torch.float32, torch.bfloat16
    qkv = BF16 * 3 * A * D * S
    expected = [
        # the SiLU's input (qkv_proj's output) and its output (q, k and v are views of it; the
        # first saver, kᵀ's product with v, sees k transposed)
        ((1, S, 3 * A * D), bf16, qkv), ((A, D, BLOCK), bf16, qkv),
        # per block: the scores times the decay mask; the running state (the first block's zeros too)
        *[((A, BLOCK, BLOCK), bf16, BF16 * A * BLOCK * BLOCK)] * BLOCKS,
        *[((A, D, D), bf16, BF16 * A * D * D)] * BLOCKS,
        # q times its decay (every block but the first, whose state is zeros and needs no grad);
        # kᵀ times its decay and the block decay (every block but the last, whose state no output
        # reaches: freed with its saves after the forward; the first block's decay multiplies the
        # zero state, which needs no grad)
        *[((A, BLOCK, D), bf16, BF16 * A * BLOCK * D)] * (BLOCKS - 1),
        *[((A, D, BLOCK), bf16, BF16 * A * D * BLOCK)] * (BLOCKS - 1),
        *[((A, 1, 1), bf16, BF16 * A)] * (BLOCKS - 2),
        # the output norm over the heads' width: its fp32 input, rstd, bf16 normalised input;
        # its output and the gate's sigmoid (the product keeps both); out_proj's input
        ((1, S, A * D), f32, FP32 * A * D * S), ((1, S, 1), f32, FP32 * S), ((1, S, A * D), bf16, BF16 * A * D * S),
        ((1, S, A * D), bf16, BF16 * A * D * S), ((1, S, A * D), bf16, BF16 * A * D * S), ((S, A * D), bf16, BF16 * A * D * S),
    ]  # fmt: skip
    assert real == sorted(expected, key=str)
    assert spec["measured"][KIND]["attention_impl"] == "eager"
    lin, full = spec["measured"][KIND]["bytes_per_token"], spec["measured"]["full_moe"]["bytes_per_token"]
    # the census's layer books, besides this module's saves, qkv_proj's input (the input norm's
    # output: attMM), and around it the same stream norms and experts as the softmax layer
    mixer = (lin["attMM"] - BF16 * H) + (lin["normOp"] - full["normOp"]) + (lin["ffAct"] - full["ffAct"])
    assert mixer * S == sum(n for *_, n in real)
    assert lin["ffAct"] - full["ffAct"] == qkv / S  # the SiLU's input
    assert lin["normOp"] - full["normOp"] == (FP32 + FP32 / (A * D) + BF16) * A * D
    assert lin["ffMM"] == full["ffMM"] and lin["linrec"] == 0


def test_minimax_gives_its_kinds_counts_and_facts(spec):
    assert spec["layers"] == [{"kind": "full_moe", "count": 1}, {"kind": KIND, "count": 1}]
    assert spec["flavours"][KIND] == {"attention": "linear_eager", "ffn": "moe"}
    assert (spec["linear_eager_heads"], spec["linear_eager_head_dim"], spec["linear_eager_block"]) == (A, D, BLOCK)
    ops = spec["ops"][KIND]
    # qkv_proj, output_gate and out_proj; one recurrence; the stream norms only (the output norm is the mixer's)
    assert {op: ops[op] for op in ("attMM", "attBMM", "softmax", "headCast", "linrec", "normOp")} == {
        "attMM": 3, "attBMM": 0, "softmax": 0, "headCast": 0, "linrec": 1, "normOp": 2,
    }  # fmt: skip
    variants = spec["variants"]
    assert {v: variants[KIND][v] for v in ("mixer_act", "mixer_out_gate", "mixer_out_norms")} == {"mixer_act": 1, "mixer_out_gate": True, "mixer_out_norms": 1}
    assert {v: variants["full_moe"][v] for v in ("mixer_act", "mixer_out_gate", "mixer_out_norms")} == {"mixer_act": 0, "mixer_out_gate": False, "mixer_out_norms": 0}
    # v's head width, and its output norm: an RMS norm over every head (one row), keeping its fp32
    # input and its bf16 normalised input; q, k and v views of the SiLU's output (3 heads' widths); none in the softmax layer
    norm_facts = ("mixer_v_head_dim", "mixer_out_norm_rows", "mixer_out_norm_fp32", "mixer_out_norm_half", "mixer_qkv_width", "mixer_qkv_joined")
    assert {v: variants[KIND][v] for v in norm_facts} == {
        "mixer_v_head_dim": D, "mixer_out_norm_rows": 1, "mixer_out_norm_fp32": 1, "mixer_out_norm_half": 1, "mixer_qkv_width": 3 * A * D, "mixer_qkv_joined": True,
    }  # fmt: skip
    assert {v: variants["full_moe"][v] for v in norm_facts} == dict.fromkeys(norm_facts, 0)


# One block (the block as long as the sequence: taken for softmax scores, then run again with
# autograd), several blocks, and many.
@pytest.mark.parametrize("seq", [BLOCK, S, 1024])
def test_linear_eager_stacks_are_priced_as_measured(seq):
    spec = run_census(TINY_MINIMAX, name="tiny-minimax", seq_length=seq)
    assert spec["flavours"][KIND]["attention"] == "linear_eager"
    for kind, (priced, measured) in priced_vs_measured(spec, seq).items():
        assert abs(priced / measured - 1) <= 0.02, (kind, priced, measured)


def test_blockwise_softmax_is_no_linear_attention():
    """A square product of fewer rows than the sequence that a softmax reads is followed and let
    be: only a value matmul reached without a softmax is a linear attention."""
    from speccat.census.kernels.routing import route_attention

    seen = []
    q, k, v = (torch.randn(1, 2, 4, 8, requires_grad=True) for _ in range(3))
    with route_attention(16, lambda *args: seen.append(args)):
        soft = torch.matmul(torch.matmul(q, k.transpose(-1, -2)).softmax(-1), v)
        assert not seen
        linear = torch.matmul(torch.matmul(q, k.transpose(-1, -2)) * 0.5, v)
    assert len(seen) == 1 and seen[0][2] is v
    torch.testing.assert_close(linear, (q @ k.transpose(-1, -2) * 0.5) @ v)
    assert soft.requires_grad and linear.requires_grad


def test_scores_taken_for_softmax_are_remade_with_autograd_for_a_linear_attention():
    """s × s scores run without autograd until the value matmul; reached with no softmax, their
    chain (the product, a decay mask) is run again with autograd, so gradients reach q and k."""
    from speccat.census.kernels.routing import route_attention

    seen = []
    q, k, v = (torch.randn(1, 2, 4, 8, requires_grad=True) for _ in range(3))
    decay = torch.rand(4, 4)
    with route_attention(4, lambda *args: seen.append(args)):
        out = torch.matmul(torch.matmul(q, k.transpose(-1, -2)) * decay, v)
    assert len(seen) == 1
    out.sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    ((q @ k.transpose(-1, -2)) * decay @ v).sum().backward()
    for got, t in zip(grads, (q, k, v)):
        torch.testing.assert_close(got, t.grad)

