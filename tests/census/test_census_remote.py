"""Remote-code configs built from a class transformers ships (census/intake/remote.py), never from remote code."""

from __future__ import annotations

import json

import pytest

from conftest import load_shipped
from speccat.census import run_census
from speccat.census.intake.remote import ALIASES, substitute
from speccat.census.spec import SpecError

TINY_DEEPSEEK = dict(
    hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, intermediate_size=128,
    moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
    kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, vocab_size=256,
    n_group=1, topk_group=1,
)  # fmt: skip
REMOTE = {"AutoModelForCausalLM": "modeling_remote.RemoteForCausalLM"}


def test_a_remote_model_type_whose_architectures_names_a_shipped_class_is_built_as_that_class():
    config = dict(model_type="kimi_k2", architectures=["DeepseekV3ForCausalLM"], auto_map=REMOTE, **TINY_DEEPSEEK)
    spec = run_census(config, name="tiny/kimi-k2", seq_length=64)
    assert spec["arch"] == "kimi_k2" and spec["built_as"] == "DeepseekV3ForCausalLM"
    # no profile claims kimi_k2: the kinds are named from their facts
    assert [(g["kind"], g["count"]) for g in spec["layers"]] == [("full_dense", 1), ("full_moe", 2)]
    assert spec["kv_lora_rank"] == 16 and spec["num_experts"] == 8 and spec["first_k_dense_replace"] == 1


def test_the_text_configs_architectures_count_too():
    config = {"model_type": "remote_vlm", "auto_map": REMOTE, "architectures": ["RemoteVLM"],
              "text_config": {"model_type": "remote_text", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                              "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256}}  # fmt: skip
    built, name = substitute(config)
    assert name == "LlamaForCausalLM" and built["model_type"] == "llama" and built["hidden_size"] == 64
    spec = run_census(config, name="tiny/remote-vlm", seq_length=64)
    assert spec["arch"] == "remote_vlm" and spec["built_as"] == "LlamaForCausalLM" and spec["num_hidden_layers"] == 2


def test_an_alias_renames_keys_and_builds_the_stated_model_type():
    assert ALIASES["internlm2"].target == "llama"
    config = dict(model_type="internlm2", architectures=["InternLM2ForCausalLM"], auto_map=REMOTE, bias=True, hidden_size=64,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, vocab_size=256)  # fmt: skip
    spec = run_census(config, name="tiny/internlm2", seq_length=64)
    assert spec["built_as"] == "LlamaForCausalLM" and spec["num_key_value_heads"] == 2
    assert spec["qkv_bias"] is True and spec["o_bias"] is True  # `bias` renamed to llama's attention_bias


def test_remote_code_no_rule_covers_is_still_refused():
    config = dict(model_type="acme_lm", architectures=["AcmeForCausalLM"], auto_map=REMOTE, **TINY_DEEPSEEK)
    assert substitute(config) is None
    with pytest.raises(SpecError) as err:
        run_census(config, name="tiny/acme")
    assert err.value.reason == "remote_code"


def test_an_alias_maps_values_minimax_m1_as_minimax():
    """MiniMax-M1-80k (remote code, MiniMaxM1ForCausalLM) by its alias: 80 layers, attn_type_list
    1 (softmax) at every 8th layer (7, 15, ... 79), 0 (lightning) elsewhere; 64 heads of 128; 32
    experts, top 2, expert width 9216; priced as measured."""
    from bench.bench_registry import worst_ratio

    config = load_shipped("MiniMaxAI/MiniMax-M1-80k")
    assert [i for i, t in enumerate(config["attn_type_list"]) if t == 1] == list(range(7, 80, 8))
    spec = run_census(config, name="MiniMaxAI/MiniMax-M1-80k", seq_length=512)
    assert spec["arch"] == "minimax_m1" and spec["built_as"] == "MiniMaxForCausalLM"
    assert [(g["kind"], g["count"]) for g in spec["layers"]] == [("linear_eager_moe", 7), ("full_moe", 1)] * 10
    assert (spec["num_attention_heads"], spec["head_dim"], spec["linear_eager_heads"], spec["linear_eager_head_dim"]) == (64, 128, 64, 128)
    assert (spec["num_experts"], spec["num_experts_per_tok"], spec["moe_intermediate_size"]) == (32, 2, 9216)
    assert abs(worst_ratio(spec) - 1) < 0.02


def test_a_value_the_alias_does_not_map_is_refused():
    config = {**load_shipped("MiniMaxAI/MiniMax-M1-80k")}
    config["attn_type_list"] = [0] * 79 + [2]
    with pytest.raises(SpecError) as err:
        run_census(config, name="MiniMaxAI/MiniMax-M1-80k")
    assert err.value.reason == "bad_value" and "attn_type_list: 2 is none of the values its alias maps" in str(err.value)


def test_a_native_config_records_the_class_it_built():
    spec = run_census(json.loads(json.dumps(load_shipped("openai-community/gpt2"))), name="openai-community/gpt2", seq_length=64)
    assert spec["built_as"] == "GPT2LMHeadModel"
