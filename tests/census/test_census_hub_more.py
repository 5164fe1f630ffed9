"""The 16 real configs shipped from ../shared/hub-configs-more (issue 12): each gives a spec (none is
refused since dbrx's experts: support/hub_more.py REFUSED is empty, and
tests/pricing/test_priced_vs_measured.py checks every shipped config censuses); the numbers each spec
must state are read from its config by hand.
"""

from __future__ import annotations

import pytest

from support.hub_more import OWN_TESTS, REFUSED, TABLE
from speccat.census.spec import FLAGS, ModelSpec

def layers(spec):
    return [(g["kind"], g["count"]) for g in spec["layers"]]


def flags(spec):
    return {flag for flag in FLAGS if spec.get(flag)}


@pytest.fixture(scope="module")
def census():
    from support.shipped_specs import shipped_spec  # each shipped config censused once per test process

    return shipped_spec


def test_gpt2_stack_under_transformer_h(census):
    # n_layer 12, n_embd 768, n_head 12 (head 64), n_inner null → 4 × 768, n_positions 1024,
    # vocab 50257; Conv1D projections with biases, LayerNorms with bias, tied head.
    spec = census("openai-community/gpt2")
    assert layers(spec) == [("decoder", 12)]
    assert (spec["hidden_size"], spec["num_attention_heads"], spec["head_dim"], spec["intermediate_size"]) == (768, 12, 64, 3072)
    assert spec["vocab_size"] == 50257 and spec["max_position_embeddings"] == 1024
    assert flags(spec) == {"qkv_bias", "o_bias", "mlp_bias", "norm_bias", "layer_norms", "tie_word_embeddings"}
    # fused c_attn (q, k, v) + c_proj: four attention projections; c_fc and c_proj: a plain MLP
    assert spec["ops"]["decoder"]["attMM"] == 4 and spec["ops"]["decoder"]["attBMM"] == 2 and spec["ops"]["decoder"]["ffMM"] == 2
    assert spec["measured"]["decoder"]["seq_length"] == 1024  # learned positions: runs at its own maximum


def test_glm_4_5_three_dense_layers_then_moe(census):
    # num_hidden_layers 92, first_k_dense_replace 3: 3 dense then 89 MoE; 160 routed experts,
    # top 8, moe_intermediate_size 1536, n_shared_experts 1, intermediate_size 12288 (dense),
    # 96 / 8 heads of head_dim 128, attention_bias true (q, k, v), use_qk_norm true.
    spec = census("zai-org/GLM-4.5")
    assert layers(spec) == [("full_dense", 3), ("full_moe", 89)]
    assert spec["built_as"] == "Glm4MoeForCausalLM"
    assert (spec["num_experts"], spec["num_experts_per_tok"], spec["moe_intermediate_size"]) == (160, 8, 1536)
    assert (spec["num_shared_experts"], spec["shared_expert_intermediate_size"], spec["intermediate_size"]) == (1, 1536, 12288)
    assert (spec["num_attention_heads"], spec["num_key_value_heads"], spec["head_dim"], spec["first_k_dense_replace"]) == (96, 8, 128, 3)
    assert flags(spec) == {"qkv_bias", "qk_norm"}
    assert spec["flavours"] == {"full_dense": {"attention": "full", "ffn": "dense"}, "full_moe": {"attention": "full", "ffn": "moe"}}


def test_kimi_k2_5_one_dense_layer_then_moe(census):
    # text_config (kimi_k2, DeepseekV3ForCausalLM): 61 layers, first_k_dense_replace 1; 384
    # routed experts top 8 of width 2048, 1 shared; MLA: kv_lora_rank 512, q_lora_rank 1536,
    # rope 64 + nope 128 = head 192, v_head_dim 128, 64 heads; vocab 163840.
    spec = census("moonshotai/Kimi-K2.5")
    assert layers(spec) == [("full_dense", 1), ("full_moe", 60)]
    assert spec["arch"] == "kimi_k25"
    assert (spec["num_experts"], spec["num_experts_per_tok"], spec["moe_intermediate_size"], spec["num_shared_experts"]) == (384, 8, 2048, 1)
    assert (spec["kv_lora_rank"], spec["q_lora_rank"], spec["qk_rope_head_dim"], spec["qk_nope_head_dim"], spec["v_head_dim"]) == (512, 1536, 64, 128, 128)
    assert (spec["num_attention_heads"], spec["head_dim"], spec["intermediate_size"], spec["vocab_size"]) == (64, 192, 18432, 163840)


@pytest.mark.parametrize("repo", sorted(TABLE))
def test_config_facts(census, repo):
    spec, row = census(repo), dict(TABLE[repo])
    assert layers(spec) == row.pop("layers")
    assert flags(spec) == row.pop("flags")
    for field, value in row.items():
        assert spec[field] == value, field


def test_every_new_config_is_tabled_or_refused():
    from conftest import SNAPSHOT

    sources = (SNAPSHOT / "SOURCES.tsv").read_text().splitlines()[-16:]
    new = {line.split("\t")[0] for line in sources}
    covered = set(REFUSED) | set(TABLE) | set(OWN_TESTS) | {"openai-community/gpt2", "zai-org/GLM-4.5", "moonshotai/Kimi-K2.5"}
    assert new == covered


@pytest.mark.parametrize("repo", sorted(TABLE) + ["openai-community/gpt2", "zai-org/GLM-4.5", "moonshotai/Kimi-K2.5"])
def test_round_trips(census, repo):
    spec = census(repo)
    assert ModelSpec.from_json(spec.to_json()) == spec
