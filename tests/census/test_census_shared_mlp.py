"""An MLP that is the layer's own child beside its MoE block and reads the MoE's input (granite's
`shared_mlp`: `moe(x) + shared_mlp(x)`) is the MoE's shared expert: its width is the spec's
shared width, its parameters are `ffn_shared`, and the records price it as one. An MLP fed
another input is not one."""

from __future__ import annotations

import pytest

from support.layer_runs import priced_vs_measured

from speccat.census import run_census

H, FF, SHARED, EXPERTS = 64, 32, 48, 4
GRANITE_SHARED = {
    "model_type": "granitemoeshared", "hidden_size": H, "intermediate_size": FF, "shared_intermediate_size": SHARED,
    "num_local_experts": EXPERTS, "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 256,
}  # fmt: skip


def _priced(spec) -> bool:
    """Every kind priced by the records within 2% of what the census measured, at its point."""
    return all(abs(priced / measured - 1) <= 0.02 for priced, measured in priced_vs_measured(spec, 256).values())


def test_a_shared_mlp_beside_the_moe_is_its_shared_expert():
    spec = run_census(GRANITE_SHARED, name="tiny-granite-shared", seq_length=256)
    assert (spec["moe_intermediate_size"], spec["shared_expert_intermediate_size"]) == (FF, SHARED)
    params = spec["params"]["kinds"]["decoder"]
    # input_linear h → 2·shared (gate and up), output_linear shared → h; no biases
    assert (params["ffn_shared"], params["ffn_dense"]) == (H * 2 * SHARED + SHARED * H, 0)
    assert params["ffn_router"] == H * EXPERTS
    assert _priced(spec)


def test_without_a_shared_mlp_there_is_no_shared_expert():
    spec = run_census({**GRANITE_SHARED, "shared_intermediate_size": 0}, name="tiny-granite", seq_length=256)
    assert "shared_expert_intermediate_size" not in spec
    assert spec["params"]["kinds"]["decoder"]["ffn_shared"] == 0
    assert _priced(spec)


@pytest.mark.parametrize("model_type", ["granitemoehybrid"])
def test_transformers_default_mamba2_moe_hybrid_with_a_shared_mlp_is_priced(model_type):
    """transformers' default granitemoehybrid: Mamba2 mixers, 8 routed experts of 11008 and a
    shared MLP of 1024 (its config's shared_intermediate_size) in every layer."""
    from transformers import CONFIG_MAPPING

    config = {**CONFIG_MAPPING[model_type]().to_dict(), "model_type": model_type}
    spec = run_census(config, name=model_type, seq_length=256)
    assert (spec["num_experts"], spec["moe_intermediate_size"], spec["shared_expert_intermediate_size"]) == (8, 11008, 1024)
    assert _priced(spec)



def test_what_the_shared_mlp_keeps_is_worked_by_hand():
    """The layer with its shared MLP keeps, per token and in bf16 beyond the same layer without
    it: input_linear's output (gate and up, 2·shared), the activation's output and the product
    output_linear reads (shared each). Its input is the router's, kept once."""
    with_mlp = run_census(GRANITE_SHARED, name="tiny-granite-shared", seq_length=256)["measured"]["decoder"]["bytes_per_token"]
    without = run_census({**GRANITE_SHARED, "shared_intermediate_size": 0}, name="tiny-granite", seq_length=256)["measured"]["decoder"]["bytes_per_token"]
    assert sum(with_mlp.values()) - sum(without.values()) == 2 * (2 * SHARED + SHARED + SHARED)
