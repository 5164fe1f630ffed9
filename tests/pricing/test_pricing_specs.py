"""The hand-built ModelSpec mappings of tests/support/pricing_specs.py are valid and pick the profiles' families."""

from __future__ import annotations

from support.pricing_specs import BUILDERS, deepseek_v2_lite, qwen35_9b

from speccat.census.spec import ModelSpec
from speccat.census.structure.family import family_for


def test_each_hand_built_spec_is_a_valid_model_spec():
    for build in BUILDERS:
        spec = build()
        assert ModelSpec(spec).kinds == tuple(dict.fromkeys(g["kind"] for g in spec["layers"]))


def test_the_builders_pick_the_families_the_profiles_declare():
    assert family_for(deepseek_v2_lite()["arch"]).name == "deepseek"
    assert deepseek_v2_lite()["v_head_dim"] == 128
    assert family_for(qwen35_9b()["arch"]).name == "qwen3_5"
    assert [g["kind"] for g in qwen35_9b()["layers"][:2]] == ["linear_attention", "full_attention"]
