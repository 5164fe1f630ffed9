"""The census's forward FLOPs (census/measure/flops.py): shipped configs' counts against formulas written
here from their config.json dims, the counts the census hands FlopCounterMode for speccat's kernels
and _grouped_mm against what FlopCounterMode counts for the same products written as matmuls, and
the bytes the probe measures unchanged by counting in the same forward."""

from __future__ import annotations

import pytest
import torch
from conftest import load_shipped
from support.shipped_specs import shipped_spec
from torch._subclasses.fake_tensor import FakeTensorMode

from speccat.census.build.model import build
from speccat.census.measure.flops import flop_counter
from speccat.census.measure.probe import probe_layers
from speccat.census.intake.resolve import resolve_config
from speccat.census.structure.shapes import classify

S = 4096  # the settings grid's default sequence length, where the census measures


def measured(repo_id: str) -> dict[str, int]:
    spec = shipped_spec(repo_id)  # the census of the shipped config, shared by the suite
    assert {m["seq_length"] for m in spec["measured"].values()} == {S}
    return {kind: m["forward_flops"] for kind, m in spec["measured"].items()}


def test_a_llama_3_2_1b_layer_is_its_projections_and_both_products_of_its_core():
    c = load_shipped("meta-llama/Llama-3.2-1B-Instruct")
    h, a, kv, dh, hff = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["intermediate_size"]
    projections = 2 * S * h * a * dh + 2 * (2 * S * h * kv * dh) + 2 * S * a * dh * h  # q, k and v, o
    mlp = 3 * (2 * S * h * hff)  # gate, up, down
    core = 4 * S * S * a * dh  # scores and probabilities × values, no causal halving
    assert measured("meta-llama/Llama-3.2-1B-Instruct") == {"decoder": projections + mlp + core}
    assert projections + mlp + core == 635_655_159_808


def test_a_qwen3_moe_layer_counts_the_chosen_experts_through_grouped_mm():
    """Qwen3-30B-A3B: the router over every expert, the 8 chosen experts per token (gate, up,
    down of moe_intermediate_size), no shared expert."""
    c = load_shipped("Qwen/Qwen3-30B-A3B")
    h, a, kv, dh = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    experts, top_k, width = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    attention = 2 * S * h * (a + 2 * kv) * dh + 2 * S * a * dh * h + 4 * S * S * a * dh
    router = 2 * S * h * experts
    chosen = top_k * 3 * (2 * S * h * width)
    assert measured("Qwen/Qwen3-30B-A3B") == {"decoder": attention + router + chosen}


def test_a_mamba_layer_counts_the_projections_inside_the_fused_kernel_and_not_its_scan():
    """mamba-130m: the in-projection (x and z), then inside speccat::mamba_inner the depthwise
    conv, the x projection (dt rank + 2·state), the dt projection and the out-projection; the
    selective scan itself counts 0 (element-wise)."""
    c = load_shipped("ArthurZ/mamba-130m")
    h, n, width, rank = c["hidden_size"], c["state_size"], c["conv_kernel"], c["time_step_rank"]
    inner = c["expand"] * h
    flops = 2 * S * h * 2 * inner + 2 * S * inner * width + 2 * S * inner * (rank + 2 * n) + 2 * S * rank * inner + 2 * S * inner * h
    assert measured("ArthurZ/mamba-130m") == {"mamba": flops}


def counted(fn) -> int:
    """The FLOPs the census's counter counts while `fn` runs on fake tensors."""
    with FakeTensorMode():
        counter = flop_counter()
        with counter:
            fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("heads, kv_heads, s_q, s_kv, d, dv", [(4, 2, 8, 8, 16, 8), (6, 6, 4, 12, 32, 32)])
def test_the_flash_kernel_counts_what_the_eager_products_count(heads, kv_heads, s_q, s_kv, d, dv):
    def flash():
        q = torch.empty(2, heads, s_q, d)
        k, v = torch.empty(2, kv_heads, s_kv, d), torch.empty(2, kv_heads, s_kv, dv)
        torch.ops.speccat.flash_attention(q, k, v, None, None, d**-0.5, True, 0, 0.0, 0.0, 0)

    def eager():
        q = torch.empty(2, heads, s_q, d)
        k, v = torch.empty(2, heads, s_kv, d), torch.empty(2, heads, s_kv, dv)
        torch.matmul(torch.matmul(q, k.transpose(-1, -2)).softmax(-1), v)

    assert counted(flash) == counted(eager) == 2 * 2 * heads * s_q * s_kv * (d + dv)


def test_grouped_mm_counts_what_one_mm_per_group_counts():
    offs = [3, 10, 16]  # three groups of 3, 7 and 6 rows

    def grouped_rows():
        torch._grouped_mm(torch.empty(16, 32, dtype=torch.bfloat16), torch.empty(3, 32, 24, dtype=torch.bfloat16), offs=torch.tensor(offs, dtype=torch.int32))

    def per_group_rows():
        for rows in (3, 7, 6):
            torch.mm(torch.empty(rows, 32), torch.empty(32, 24))

    def batched():
        torch._grouped_mm(torch.empty(3, 5, 32, dtype=torch.bfloat16), torch.empty(3, 32, 24, dtype=torch.bfloat16))

    def per_group_batched():
        for _ in range(3):
            torch.mm(torch.empty(5, 32), torch.empty(32, 24))

    assert counted(grouped_rows) == counted(per_group_rows) == 2 * 16 * 32 * 24
    assert counted(batched) == counted(per_group_batched) == 2 * 3 * 5 * 32 * 24


def test_counting_flops_in_the_probe_changes_no_measured_byte():
    top, text, _ = resolve_config(load_shipped("meta-llama/Llama-3.2-1B-Instruct"))
    built = build(top, text)
    first = [classify(built.layers)[0][1].first]
    plain = probe_layers(built, first, 1024)[first[0]]
    built = build(top, text)
    with_flops = probe_layers(built, first, 1024, flops=True)[first[0]]
    assert plain.forward_flops == 0 and with_flops.forward_flops > 0
    assert with_flops.saved_bytes == plain.saved_bytes and with_flops.saved_bytes
    assert with_flops.kept_by_call == plain.kept_by_call
