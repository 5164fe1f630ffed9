"""Layer kinds come from what the census sees (census/structure/kinds.py), never from a profile that must foresee them.

- Two differently built layers never share a kind: a dense layer among MoE layers in a family
  whose profile has one kind gets a kind of its own.
- A model_type no profile claims is censused in full, its kinds named from their facts.
- Names are readable and stable: mixer × feed-forward, then sliding, class, ordinal.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from speccat.census import run_census
from speccat.census.structure.shapes import Shape
from speccat.census.structure.family import family_for, load_families
from speccat.census.structure.kinds import base_name, derived_names, kind_names, profile_names, snake

TINY = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, vocab_size=256)


def stack(spec):
    return [(g["kind"], g["count"]) for g in spec["layers"]]


def test_a_dense_layer_among_moe_layers_gets_its_own_kind_although_the_profile_has_one():
    # qwen2_moe: mlp_only_layers [0] makes layer 0 a dense MLP and layers 1-2 sparse MoE blocks.
    config = dict(
        model_type="qwen2_moe", num_hidden_layers=3, intermediate_size=128, moe_intermediate_size=32,
        shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=2, mlp_only_layers=[0], **TINY,
    )  # fmt: skip
    assert len(family_for("qwen2_moe").kinds) == 1  # the qwen profile names one kind only
    spec = run_census(config, name="tiny/qwen2-moe", seq_length=64)
    assert stack(spec) == [("full_dense", 1), ("full_moe", 2)]
    assert spec["flavours"] == {"full_dense": {"attention": "full", "ffn": "dense"}, "full_moe": {"attention": "full", "ffn": "moe"}}
    assert spec["ops"]["full_dense"]["ffMM"] == 3 and spec["ops"]["full_moe"]["ffMM"] == 3
    assert spec["intermediate_size"] == 128 and spec["moe_intermediate_size"] == 32


def test_a_model_type_no_profile_claims_is_censused_in_full():
    # glm4_moe: first_k_dense_replace 2 of 4 layers dense, then MoE (8 routed experts, top 2, 1 shared).
    config = dict(
        model_type="glm4_moe", num_hidden_layers=4, intermediate_size=96, moe_intermediate_size=32, n_routed_experts=8,
        num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=2, head_dim=16, **TINY,
    )  # fmt: skip
    assert family_for("glm4_moe").name == "default"
    spec = run_census(config, name="tiny/glm4-moe", seq_length=64)
    assert stack(spec) == [("full_dense", 2), ("full_moe", 2)]
    assert spec["first_k_dense_replace"] == 2 and spec["num_experts"] == 8 and spec["num_experts_per_tok"] == 2
    assert spec["intermediate_size"] == 96 and spec["moe_intermediate_size"] == 32
    for kind in ("full_dense", "full_moe"):
        assert spec["ops"][kind]["attBMM"] == 2 and spec["ops"][kind]["ffMM"] == 3 and spec["ops"][kind]["normOp"] == 2


def test_a_single_kind_model_keeps_the_profile_name():
    spec = run_census(dict(model_type="llama", num_hidden_layers=2, intermediate_size=128, **TINY), name="tiny/llama", seq_length=64)
    assert stack(spec) == [("decoder", 2)]


def shape(attention, ffn, layers, cls="DecoderLayer", params=()):
    return Shape(attention, ffn, (cls, attention, ffn, params), list(layers))


def test_base_names_leave_out_what_a_layer_lacks():
    assert base_name("full", "dense") == "full_dense"
    assert base_name("mamba2", "none") == "mamba2"
    assert base_name("none", "moe") == "moe"
    assert snake("Glm4MoeMTPLayer") == "glm4_moe_mtp_layer"


def test_clashing_names_are_told_apart_by_sliding_then_class_then_ordinal():
    config = SimpleNamespace(layer_types=["sliding_attention", "full_attention", "full_attention", "full_attention"])
    sliding = shape("full", "dense", [0], params=(1,))
    full = shape("full", "dense", [1], params=(2,))
    other_class = shape("full", "dense", [2], cls="MTPLayer")
    same_again = shape("full", "dense", [3], params=(3,))
    names = derived_names([sliding, full, other_class, same_again], config)
    assert names == ["sliding_dense", "full_dense_decoder_layer", "full_dense_mtp_layer", "full_dense_decoder_layer_2"]
    assert len(set(names)) == len(names)
    assert derived_names([sliding, full, other_class, same_again], config) == names  # stable


def test_a_profile_names_kinds_only_when_it_maps_every_shape_one_to_one():
    families = load_families()
    deepseek = families["deepseek"]
    dense, moe = shape("full", "dense", [0]), shape("full", "moe", [1, 2])
    assert profile_names(deepseek, [dense, moe]) == ["dense", "moe"]
    assert profile_names(deepseek, [dense, moe, shape("full", "moe", [3], cls="Other")]) is None  # two shapes on "moe"
    assert profile_names(families["default"], [dense, moe]) is None  # one kind for two shapes
    assert profile_names(families["qwen3_5"], [shape("mamba2", "none", [0])]) is None  # no kind for that mixer
    names, by_profile = kind_names(families["default"], [dense, moe], SimpleNamespace())
    assert (names, by_profile) == (["full_dense", "full_moe"], False)


@pytest.mark.parametrize("attention", ["full", "linear"])
def test_derived_names_are_valid_spec_kind_names(attention):
    import re

    long = shape(attention, "moe", [0], cls="A" * 80)
    names = derived_names([long, shape(attention, "moe", [1], cls="B" * 80)], SimpleNamespace())
    assert all(re.fullmatch(r"[a-z][a-z0-9_]{0,63}", n) for n in names) and len(set(names)) == 2
