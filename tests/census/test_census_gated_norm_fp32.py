"""Which of the tensors a linear attention's SiLU-gated output norm keeps are fp32
(gated_norm_fp32). Qwen3-Next's RMSNormGated casts its input to fp32, applies its weight in the
compute dtype and its SiLU gate in fp32: it keeps its fp32 input, the bf16 normalised input, the
bf16 weighted product, the gate's fp32 SiLU input and output (3 of 5 in fp32) and an fp32 rstd
per row. lara_mini's applies its weight in fp32 too ("strict FP32 norm"): all 5 fp32. The census
counts the norm's fp32 rows of its width (LayerProbe.norm_fp32_rows); the records' `norm` slot
prices the five at those dtypes."""

from __future__ import annotations

import importlib

import pytest
import torch

from bench.bench_registry import default_config as default
from support.layer_runs import priced_vs_measured, saves_and_grads

from speccat.census import run_census

BF16, FP32 = 2, 4
ROWS, HEAD = 48, 32  # rows the tiny norm runs over (tokens × value heads), its width (a value head's)



@pytest.fixture(scope="module")
def lara():
    return run_census(default("lara_mini"), name="lara_mini", seq_length=256).to_dict()


def test_lara_minis_gated_norm_worked_by_hand(lara):
    """lara_mini's linear-attention layers (16 value heads of 128): the gated norm keeps per
    token 5 fp32 tensors of 16·128 and an fp32 rstd per head, 5·4·2048 + 4·16 bytes, where a
    Qwen3-Next-style norm (3 fp32, 2 bf16) keeps 2·(4 − 2)·2048 fewer; its other kinds (softmax
    attention) have no gated norm. Every kind is priced within 2% of what the census measured
    (the linear one was 6% short with 3 fp32)."""
    heads, head = 16, 128
    assert (lara["linear_num_value_heads"], lara["linear_value_head_dim"]) == (heads, head)
    facts = {kind: (v["gated_norm"], v["gated_norm_fp32"]) for kind, v in lara["variants"].items()}
    assert facts == {"linear_moe": (True, 5), "sliding_moe": (False, 0), "full_moe": (False, 0)}
    prices = priced_vs_measured(lara, 256)
    for kind, (priced, measured) in prices.items():
        assert abs(priced / measured - 1) <= 0.02, kind
    linear = lara["variants"]["linear_moe"]
    as_qwen3_next = dict(lara, variants={**lara["variants"], "linear_moe": dict(linear, gated_norm_fp32=3)})
    assert prices["linear_moe"][0] - priced_vs_measured(as_qwen3_next, 256)["linear_moe"][0] == 2 * (FP32 - BF16) * heads * head


@pytest.mark.parametrize(
    ("model_type", "norm_class", "fp32"),
    [("lara_mini", "LaraMiniRMSNormGated", 5), ("qwen3_next", "Qwen3NextRMSNormGated", 3)],
    ids=["lara_mini-weight-in-fp32", "qwen3_next-weight-in-bf16"],
)
def test_the_fact_prices_what_the_real_norm_keeps(model_type, norm_class, fp32):
    """The census's fact for the model's default config, and the real gated norm of the model's
    code run on CPU in bf16 over ROWS rows of HEAD: it keeps `fp32` tensors of HEAD in fp32, the
    other 5 − `fp32` in bf16, and one fp32 rstd a row, as the records price a row (beside them
    lara_mini's fp32 copy of its weight, one a call whatever the tokens)."""
    spec = run_census(default(model_type), name=model_type, seq_length=256).to_dict()
    assert {v["gated_norm_fp32"] for v in spec["variants"].values() if v["gated_norm"]} == {fp32}
    modeling = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    norm = getattr(modeling, norm_class)(HEAD).to(torch.bfloat16)
    torch.manual_seed(1)
    x = torch.randn(ROWS, HEAD, dtype=torch.bfloat16, requires_grad=True)
    gate = torch.randn(ROWS, HEAD, dtype=torch.bfloat16, requires_grad=True)
    kept, _ = saves_and_grads(norm, norm, x, gate=gate)
    rows = {k: t for k, t in kept.items() if t.dim() > 1}  # lara_mini's fp32 copy of its weight, one a call, is no row
    rows_of = lambda dtype: sum(1 for t in rows.values() if t.dtype == dtype and t.shape[-1] == HEAD)  # noqa: E731
    assert (rows_of(torch.float32), rows_of(torch.bfloat16)) == (fp32, 5 - fp32)
    per_row = (FP32 * fp32 + BF16 * (5 - fp32)) * HEAD + FP32  # the records' gated_norm term, a row (a head of a token)
    assert sum(t.untyped_storage().nbytes() for t in rows.values()) == per_row * ROWS
