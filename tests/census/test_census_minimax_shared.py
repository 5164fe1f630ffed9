"""What a MoE block's shared experts keep, read off what ran (shared_kept, shared_act_saved):
minimax-m3's shared experts write their clamped SwiGLU inline (gate.clamp, up.clamp, gate ·
sigmoid(α·gate), (up + 1) · glu), with no activation module, and keep seven tensors of their
width a token where a gated MLP with an activation module keeps four. The census counts the
storages the shared experts made and saved in their own code (census/measure/kept_modules.py);
the records' shared slot prices those counts."""

from __future__ import annotations

import pytest
import torch

from bench.bench_registry import default_config as default
from support.layer_runs import priced_vs_measured, saves_and_grads, tiny_model

from speccat.census import run_census

SEQ = 64
BF16 = 2
TINY_MINIMAX = dict(
    hidden_size=128, intermediate_size=64, shared_intermediate_size=64, dense_intermediate_size=256, num_attention_heads=4,
    num_key_value_heads=2, head_dim=32, rotary_dim=16, num_local_experts=8, num_experts_per_tok=2, num_hidden_layers=2,
    vocab_size=256, mlp_layer_types=["sparse"] * 2, layer_types=["full_attention"] * 2, bos_token_id=None, eos_token_id=None,
)  # fmt: skip
TINY_QWEN2_MOE = dict(
    hidden_size=128, moe_intermediate_size=64, shared_expert_intermediate_size=96, intermediate_size=256, num_attention_heads=4,
    num_key_value_heads=2, num_experts=8, num_experts_per_tok=2, num_hidden_layers=2, vocab_size=256,
    layer_types=["full_attention"] * 2, mlp_only_layers=[],
)  # fmt: skip



def shared_facts(spec) -> dict[str, tuple[int, int]]:
    return {kind: (facts["shared_kept"], facts["shared_act_saved"]) for kind, facts in spec["variants"].items()}


def op_prices(spec) -> dict[str, dict[str, float]]:
    """kind -> op -> the records' bytes per token at the census's point (seq 256, flash, no recompute)."""
    import dataclasses
    from collections import defaultdict

    from speccat.catalogue.records import opsplit
    from speccat.flows.analysis import pricing_inputs

    records, grid, _, _ = pricing_inputs()
    setting = grid.setting({"stack": "transformers", "seq_length": 256, "tp": 1, "cp": 1, "sequence_parallel": False, "micro_batch": 1, "attention_kernel": "flash"})
    per: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in opsplit.op_prices(spec, records, dataclasses.replace(grid, curve=(setting,))):
        per[row["kind"]][row["op"]] += row["kept_bytes"] / 256
    return per


@pytest.fixture(scope="module")
def minimax():
    return run_census(default("minimax_m3_vl_text"), name="minimax_m3_vl_text", seq_length=256).to_dict()


def test_minimax_m3s_shared_experts_worked_by_hand(minimax):
    """minimax-m3 (h 6144, 128 experts of 3072, 4 chosen, one shared expert of 3072, SwiGLU
    clamped at 7): its shared experts keep per token, bf16, gate_up's output (2·3072: the two
    clamps read its halves), the clamped gate, the sigmoid's output, up + 1, the glu and the
    product down_proj reads (3072 each): 7 widths, all booked to the MoE block (ffMM), none to
    an activation (no activation call). The routed experts' gate function (an activation region)
    keeps 6 widths a slot (gate_up 2, the clamped gate, the sigmoid, up + 1, the glu): ffAct is
    theirs alone. The records' ffMM is then what the census measured, less the grouped matmuls'
    int32 offset per expert a layer call, which no record prices (128·4 bytes over 256 tokens)."""
    shared, chosen, width, experts, tokens = 3072, 4, 3072, 128, 256
    assert (minimax["shared_expert_intermediate_size"], minimax["moe_intermediate_size"], minimax["num_experts_per_tok"]) == (shared, width, chosen)
    assert shared_facts(minimax) == {"decoder": (7, 0)}
    measured = minimax["measured"]["decoder"]["bytes_per_token"]
    assert measured["ffAct"] == chosen * 6 * BF16 * width
    priced = op_prices(minimax)["decoder"]
    assert priced["ffAct"] == measured["ffAct"]
    assert measured["ffMM"] - priced["ffMM"] == experts * 4 / tokens
    # the records' shared slot before these facts (a gated MLP with an activation module: 3 ffMM, 1 ffAct)
    former = dict(minimax, variants={"decoder": dict(minimax["variants"]["decoder"], shared_kept=3, shared_act_saved=1)})
    assert priced["ffMM"] - op_prices(former)["decoder"]["ffMM"] == (7 - 3) * BF16 * shared
    assert op_prices(former)["decoder"]["ffAct"] - priced["ffAct"] == BF16 * shared


@pytest.mark.parametrize(
    ("model_type", "config", "shared_path", "facts"),
    [
        ("minimax_m3_vl_text", default("minimax_m3_vl_text", **TINY_MINIMAX), "mlp.shared_experts", (7, 0)),
        ("qwen2_moe", default("qwen2_moe", **TINY_QWEN2_MOE), "mlp.shared_expert", (3, 1)),
    ],
    ids=["minimax-inline-gate", "qwen2-moe-activation-module"],
)
def test_the_facts_are_what_the_real_shared_experts_keep(model_type, config, shared_path, facts):
    """A tiny model's layer-0 shared experts run for real on CPU in bf16 over SEQ tokens: the
    bytes they keep beyond their input (and their output, which nothing of theirs keeps) are the
    census's two facts times their width, per token (qwen2-moe's gate, up, SiLU's input and
    output and the product: 3 + 1; minimax-m3's seven, 7 + 0)."""
    spec = run_census(config, name=f"tiny-{model_type}", seq_length=SEQ).to_dict()
    width = spec["shared_expert_intermediate_size"]
    assert set(shared_facts(spec).values()) == {facts}
    model = tiny_model(config, torch.bfloat16)
    shared = model.model.layers[0].get_submodule(shared_path)
    torch.manual_seed(1)
    x = torch.randn(SEQ, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    kept, _ = saves_and_grads(model, shared, x)
    assert sum(t.untyped_storage().nbytes() for t in kept.values()) == sum(facts) * BF16 * width * SEQ


def test_a_tiny_minimax_layer_is_priced():
    """The tiny minimax-m3 layer's kinds are priced within 2% of what the census measured (they
    were over 4% short with the shared slot's former four widths)."""
    spec = run_census(default("minimax_m3_vl_text", **TINY_MINIMAX), name="tiny-minimax", seq_length=256).to_dict()
    for kind, (priced, measured) in priced_vs_measured(spec, 256).items():
        assert abs(priced / measured - 1) <= 0.02, kind


def test_a_moe_without_shared_experts_states_none():
    """qwen3_moe has no shared experts: neither fact."""
    spec = run_census(default("qwen3_moe"), name="qwen3_moe", seq_length=256).to_dict()
    assert set(shared_facts(spec).values()) == {(0, 0)}
