"""The hand-built ModelSpec mappings of tests/support/pricing_specs.py are valid and pick the profiles' families."""

from __future__ import annotations

from support.pricing_specs import BUILDERS, deepseek_v2_lite, qwen35_9b

from speccat.census.spec import ModelSpec


def test_each_hand_built_spec_is_a_valid_model_spec():
    for build in BUILDERS:
        spec, defaults = build()
        assert ModelSpec(spec).kinds == tuple(dict.fromkeys(g["kind"] for g in spec["layers"]))
        assert set(defaults["defaults"]) >= {"norm_bytes", "dropout_bytes", "softmax_bytes"}


def test_the_builders_pick_the_families_the_profiles_declare():
    assert deepseek_v2_lite()[1]["family"] == "deepseek"
    assert deepseek_v2_lite()[1]["model"]["v_head_dim"] == 128
    assert qwen35_9b()[1]["family"] == "qwen3_5"
    assert [g["kind"] for g in qwen35_9b()[0]["layers"][:2]] == ["linear_attention", "full_attention"]
