"""databricks/dbrx-instruct: a flat config whose language model is built from sub-configs of its
own (attn_config, ffn_config). The census builds it from them (census/intake/config.py keeps a flat
config's own `*_config` mappings and drops only other modalities', other models', storage and
other tools' ones), so transformers builds the model the config states; the census then refuses
it for its experts: DbrxExperts holds every expert's weights in 2-D matrices and loops over the
experts the router chose, neither the experts interface nor stacked experts (docs/census.md,
Known limits).

Before, both sub-configs were dropped as if they were another modality's, the model was built
from DbrxAttentionConfig's defaults, which state no rope_theta, and the census refused the
config as `bad_value` ("'DbrxAttentionConfig' object has no attribute 'rope_theta'").
"""

from __future__ import annotations

import copy

import pytest
from conftest import load_shipped

from speccat.census import config_hash, language_config
from speccat.census.spec import SpecError

REPO = "databricks/dbrx-instruct"


@pytest.fixture(scope="module")
def config() -> dict:
    return load_shipped(REPO)


@pytest.fixture(scope="module")
def built(config):
    from speccat.census.build.model import build
    from speccat.census.intake.resolve import resolve_config

    top, text, nested = resolve_config(config)
    assert not nested and text is top
    return top, build(top, text)


def test_the_language_config_keeps_the_models_own_sub_configs(config):
    language = language_config(config)
    assert language["attn_config"] == config["attn_config"]
    assert language["ffn_config"] == config["ffn_config"]


def test_the_sub_configs_are_in_the_config_hash(config):
    wider = copy.deepcopy(config)
    wider["ffn_config"]["ffn_hidden_size"] = 2 * config["ffn_config"]["ffn_hidden_size"]
    assert config_hash(wider) != config_hash(config)
    more_kv = copy.deepcopy(config)
    more_kv["attn_config"]["kv_n_heads"] = 16
    assert config_hash(more_kv) != config_hash(config)


@pytest.mark.parametrize(
    "key, value",
    [
        ("vision_config", {"hidden_size": 1}),  # another modality
        ("quantization_config", {"quant_method": "fp8"}),  # how the weights are stored
        ("transformers.js_config", {"dtype": "q4"}),  # another tool's settings
        ("depth_decoder_config", {"model_type": "moshi_depth", "hidden_size": 1}),  # a model of its own
    ],
)
def test_other_parts_stay_out_of_the_language_config_and_the_hash(config, key, value):
    other = {**copy.deepcopy(config), key: value}
    assert key not in language_config(other)
    assert config_hash(other) == config_hash(config)


def test_transformers_gets_the_stated_sub_configs(built, config):
    top, _ = built
    attn, ffn = config["attn_config"], config["ffn_config"]
    assert (top.attn_config.kv_n_heads, top.attn_config.clip_qkv, top.attn_config.rope_theta) == (attn["kv_n_heads"], attn["clip_qkv"], attn["rope_theta"])
    assert (top.ffn_config.ffn_hidden_size, top.ffn_config.moe_num_experts, top.ffn_config.moe_top_k) == (
        ffn["ffn_hidden_size"],
        ffn["moe_num_experts"],
        ffn["moe_top_k"],
    )


def test_the_built_model_has_the_configs_dims(built, config):
    _, model = built
    d, heads, kv = config["d_model"], config["n_heads"], config["attn_config"]["kv_n_heads"]
    experts, width = config["ffn_config"]["moe_num_experts"], config["ffn_config"]["ffn_hidden_size"]
    head_dim = d // heads  # 128
    assert len(model.layers) == config["n_layers"] == 40
    layer = model.layers[0]
    attn = layer.norm_attn_norm.attn
    assert tuple(attn.Wqkv.weight.shape) == ((heads + 2 * kv) * head_dim, d) == (8192, 6144)
    assert tuple(attn.out_proj.weight.shape) == (d, d)
    ffn = layer.ffn
    assert tuple(ffn.router.layer.weight.shape) == (experts, d) == (16, 6144)
    for weight in (ffn.experts.mlp.w1, ffn.experts.mlp.v1, ffn.experts.mlp.w2):
        assert tuple(weight.shape) == (experts * width, d) == (16 * 10752, 6144)
    assert tuple(model.embedding.weight.shape) == (config["vocab_size"], d)


def test_the_census_refuses_it_for_its_experts_not_its_config(config):
    from speccat.census import run_census

    with pytest.raises(SpecError) as err:
        run_census(config, name=REPO)
    assert err.value.reason == "unsupported_layer", str(err.value)
    assert "ffn.experts" in str(err.value) and "experts interface" in str(err.value)
    assert "rope_theta" not in str(err.value)


def test_mpts_attn_config_reaches_transformers_too():
    """The same for any flat config: mpt's attention switches live in its attn_config."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from speccat.census.intake.resolve import resolve_config

    mpt = CONFIG_MAPPING["mpt"]().to_dict()
    mpt.update(model_type="mpt", d_model=256, n_heads=4, n_layers=2, vocab_size=1000, max_seq_len=512)
    mpt["attn_config"] = {**mpt["attn_config"], "qk_ln": True, "clip_qkv": 6.0, "alibi": False}
    top, _, _ = resolve_config(mpt)
    assert (top.attn_config.qk_ln, top.attn_config.clip_qkv, top.attn_config.alibi) == (True, 6.0, False)
