"""A router that casts its half weight to fp32 for its matmul (router_weight_fp32) and gathers the
chosen logits from the fp32 logits of every expert (router_scores_all): kolibri1's
`F.linear(x.float(), weight.float())`, then `logits.gather(1, topk(logits + bias))` before the
sigmoid. The matmul keeps the weight's fp32 copy (one a layer call, whatever the tokens) and
the gather keeps its whole source. The census reads both off what ran
(census/measure/param_casts.py, the router's ops); a router whose weight is kept in fp32
(DeepSeek-V3's gate.weight) states no cast.
"""

from __future__ import annotations

import pytest
import torch
from bench.bench_registry import default_config as default
from support.layer_runs import priced_vs_measured, saves_and_grads, signature, tiny_model

from speccat.census import run_census

F4, I8 = 4, 8  # fp32, int64 bytes
H, E, K, S = 64, 16, 2, 32  # hidden, experts, top-k, tokens
TINY = dict(
    hidden_size=H, num_local_experts=E, num_experts_per_tok=K, moe_intermediate_size=32, shared_expert_intermediate_size=32,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=2, vocab_size=128, sliding_window=16,
    layer_types=["full_attention"] * 2,
)  # fmt: skip



@pytest.fixture(scope="module")
def kolibri1():
    return run_census(default("kolibri1", **TINY), name="kolibri1", seq_length=S)


def test_kolibri1_states_the_cast_weight_rows_and_the_gathered_scores(kolibri1):
    facts = kolibri1["variants"]["decoder"]
    assert facts["router_weight_fp32"] == E  # the router's weight, one row per expert
    assert facts["router_scores_all"] and facts["router_fp32_input"]
    assert not facts["router_renorm"]  # norm_topk_prob false by default


def test_deepseek_v3s_fp32_router_weight_is_no_cast():
    """DeepSeek-V3 keeps gate.weight in fp32 (_keep_in_fp32_modules_strict): the .float() is the
    parameter itself, nothing is copied."""
    tiny = dict(hidden_size=H, n_routed_experts=E, num_experts_per_tok=K, moe_intermediate_size=32, intermediate_size=64, n_group=1, topk_group=1,
                num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=8,
                v_head_dim=16, head_dim=8, num_hidden_layers=2, first_k_dense_replace=1, vocab_size=128)  # fmt: skip
    spec = run_census(default("deepseek_v3", **tiny), name="deepseek_v3", seq_length=S)
    moe = [kind for kind, facts in spec["variants"].items() if facts.get("router_fp32_input")]
    assert moe and all(spec["variants"][kind]["router_weight_fp32"] == 0 for kind in moe)


class _Scores(torch.nn.Module):
    """The router returning its chosen weights (its logits, which the gather keeps, are then no output)."""

    def __init__(self, router: torch.nn.Module):
        super().__init__()
        self.router = router

    def forward(self, x):
        return self.router(x)[1]


def test_the_router_keeps_its_weights_fp32_copy_in_a_real_cpu_run():
    """One real bf16 forward and backward of the tiny kolibri1's router on CPU keeps, storage by
    storage: the fp32 input (S×H), the fp32 copy of the weight (E×H, seen transposed), the fp32
    logits the gather keeps whole (S×E) and the top-k indices (S×K int64); the sigmoid's fp32
    output, which its backward keeps too, is the output here."""
    model = tiny_model(default("kolibri1", **TINY), torch.bfloat16)
    x = torch.randn(S, H, dtype=torch.bfloat16, requires_grad=True)
    kept, _ = saves_and_grads(model, _Scores(model.model.layers[0].mlp.gate), x)
    expected = [torch.empty(S, H), torch.empty(H, E), torch.empty(S, E), torch.empty(S, K, dtype=torch.int64)]
    assert signature(kept.values()) == signature(expected)


def test_the_router_is_priced_as_measured(kolibri1):
    """The router's saves by hand, per token at S tokens: the fp32 input (4·H), the gathered fp32
    logits (4·E), the chosen indices (8·K) and the weight's fp32 copy spread over the tokens
    (4·E·H/S); the kind's price is what the census measured less what no record prices."""
    by_hand = F4 * H + F4 * E + I8 * K + F4 * E * H / S
    assert by_hand == 256 + 64 + 16 + 128
    priced, measured = priced_vs_measured(kolibri1, S)["decoder"]
    # what no record prices: the sigmoid's fp32 output (4·K; the records price the chosen weights
    # in the compute dtype only where the router does not score every expert) and grouped_mm's
    # int32 offsets, one per expert (4·E/S)
    assert measured - priced == F4 * K + 4 * E / S
    without = dict(kolibri1, variants={k: {**v, "router_weight_fp32": 0} for k, v in kolibri1["variants"].items()})
    assert priced - priced_vs_measured(without, S)["decoder"][0] == pytest.approx(F4 * E * H / S)
