"""ModelSpec validation and its exact JSON round trip."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from speccat.catalogue.vocabulary import CACHED, OPS, OTHER
from speccat.census.spec import REASONS, ModelSpec, SpecError

STD = dict(zip(OPS, (4, 2, 3, 1, 0, 2, 4, 1, 1, 0)))


def deepseek_v3_shaped() -> dict:
    """A DeepSeek-V3-shaped spec: MLA, dense×3 then moe×58, with params and measured bytes."""
    kind_params = {"attention": 187_107_328, "ffn_routed": 0, "ffn_shared": 0, "ffn_router": 0,
                   "ffn_dense": 396_361_728, "norm": 14_336 + 1_536 + 512, "other": 0}
    moe_params = dict(kind_params, ffn_dense=0, ffn_routed=256 * 3 * 7168 * 2048,
                      ffn_shared=3 * 7168 * 2048, ffn_router=256 * 7168 + 256)
    measured = {
        "seq_length": 4096,
        "attention_impl": "speccat_flash",
        "bytes_per_token": {**{op: 0 for op in OPS}, "attMM": 43008.0, "attBMM": 98304.5, OTHER: 0.25, CACHED: 0.0},
    }
    return {
        "name": "deepseek-ai/DeepSeek-V3",
        "arch": "deepseek_v3",
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "vocab_size": 129280,
        "intermediate_size": 18432,
        "max_position_embeddings": 163840,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "num_shared_experts": 1,
        "moe_intermediate_size": 2048,
        "first_k_dense_replace": 3,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "qkv_bias": False,
        "o_bias": False,
        "mlp_bias": False,
        "norm_bias": False,
        "qk_norm": False,
        "tie_word_embeddings": False,
        "layer_norms": False,
        "layers": [{"kind": "dense", "count": 3}, {"kind": "moe", "count": 58}],
        "ops": {"dense": dict(STD), "moe": dict(STD)},
        "flavours": {"dense": {"attention": "full", "ffn": "dense"}, "moe": {"attention": "full", "ffn": "moe"}},
        "params": {"embedding": 129280 * 7168, "output": 129280 * 7168, "final_norm": 7168,
                   "kinds": {"dense": kind_params, "moe": moe_params}},
        "measured": {"dense": copy.deepcopy(measured), "moe": dict(copy.deepcopy(measured), experts_impl="grouped_mm")},
    }


def refused(data, reason: str, *words: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        ModelSpec(data)
    assert info.value.reason == reason, str(info.value)
    for word in words:
        assert word in str(info.value), f"{word!r} not in {info.value}"
    return info.value


def test_deepseek_v3_shaped_spec_round_trips_through_json_unchanged():
    data = deepseek_v3_shaped()
    spec = ModelSpec(data)
    text = spec.to_json()
    again = ModelSpec.from_json(text)
    assert again == spec
    assert again.to_dict() == data
    assert json.loads(text) == data
    assert again.to_json() == text
    # floats keep their exact value, ints stay ints
    assert again["measured"]["moe"]["bytes_per_token"]["attBMM"] == 98304.5
    assert type(again["hidden_size"]) is int
    assert spec.kinds == ("dense", "moe")


def test_spec_is_read_only_and_detached_from_its_input():
    data = deepseek_v3_shaped()
    spec = ModelSpec(data)
    data["layers"][0]["count"] = 99
    assert spec["layers"][0]["count"] == 3
    spec["layers"][0]["count"] = 77  # a copy is handed out; the spec is unchanged
    assert spec["layers"][0]["count"] == 3
    with pytest.raises(TypeError):
        spec["hidden_size"] = 1  # type: ignore[index]


def test_absent_is_not_zero():
    data = deepseek_v3_shaped()
    del data["q_lora_rank"]  # DeepSeek-V2-Lite has no query latent
    spec = ModelSpec(data)
    assert "q_lora_rank" not in spec
    data["q_lora_rank"] = None
    refused(data, "bad_value", "q_lora_rank", "null")


def test_unknown_key_is_refused_naming_it():
    data = deepseek_v3_shaped()
    data["hidden_sise"] = 7168
    refused(data, "bad_value", "hidden_sise", "allowed")


@pytest.mark.parametrize("field", ["name", "arch", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "layers", "ops"])
def test_missing_required_field(field):
    data = deepseek_v3_shaped()
    del data[field]
    refused(data, "missing_field", field)


@pytest.mark.parametrize("field,value", [("hidden_size", 0), ("hidden_size", -7168), ("vocab_size", 0),
                                         ("num_key_value_heads", 0), ("kv_lora_rank", -1), ("head_dim", 0)])
def test_non_positive_sizes_are_refused(field, value):
    data = deepseek_v3_shaped()
    data[field] = value
    refused(data, "bad_value", field, ">= 1")


def test_first_k_dense_replace_may_be_zero_but_not_negative():
    data = deepseek_v3_shaped()
    data["first_k_dense_replace"] = 0
    ModelSpec(data)
    data["first_k_dense_replace"] = -1
    refused(data, "bad_value", "first_k_dense_replace", ">= 0")


@pytest.mark.parametrize("value", [7168.0, "7168", True, None, [7168]])
def test_sizes_must_be_integers(value):
    data = deepseek_v3_shaped()
    data["hidden_size"] = value
    refused(data, "bad_value", "hidden_size", "integer")


@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_flags_must_be_booleans(value):
    data = deepseek_v3_shaped()
    data["qk_norm"] = value
    refused(data, "bad_value", "qk_norm", "true or false")


def test_heads_not_divisible_by_kv_heads():
    data = deepseek_v3_shaped()
    data["num_key_value_heads"] = 48
    refused(data, "bad_value", "num_key_value_heads", "128", "48", "divisible")


def test_a_kind_may_state_its_own_attention_dims():
    data = deepseek_v3_shaped()
    own = {"num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128}  # a GQA kind beside MLA ones
    spec = ModelSpec(dict(data, attention_dims={"dense": own}))
    assert ModelSpec.from_json(spec.to_json()) == spec and spec["attention_dims"]["dense"] == own
    refused(dict(data, attention_dims={"other": own}), "bad_value", "attention_dims", "other")
    refused(dict(data, attention_dims={}), "bad_value", "attention_dims")
    refused(dict(data, attention_dims={"dense": dict(own, hidden_size=64)}), "bad_value", "attention_dims.dense", "hidden_size")
    refused(dict(data, attention_dims={"dense": {"head_dim": 128}}), "missing_field", "attention_dims.dense.num_attention_heads")
    refused(dict(data, attention_dims={"dense": dict(own, num_key_value_heads=7)}), "bad_value", "attention_dims.dense.num_key_value_heads")
    refused(dict(data, attention_dims={"dense": dict(own, head_dim=0)}), "bad_value", "attention_dims.dense.head_dim")


def test_stack_must_sum_to_num_hidden_layers():
    data = deepseek_v3_shaped()
    data["layers"][1]["count"] = 57
    refused(data, "bad_value", "layers", "60", "61")


def test_stack_groups_must_be_run_length():
    data = deepseek_v3_shaped()
    data["layers"] = [{"kind": "dense", "count": 3}, {"kind": "moe", "count": 50}, {"kind": "moe", "count": 8}]
    refused(data, "bad_value", "layers[2]", "merged")


def test_ops_need_all_ten_counts():
    data = deepseek_v3_shaped()
    del data["ops"]["moe"]["linrec"]
    refused(data, "missing_field", "ops.moe.linrec")
    data = deepseek_v3_shaped()
    data["ops"]["moe"]["attmm"] = 4
    refused(data, "bad_value", "ops.moe", "attmm")


def test_ops_kinds_must_match_the_stack():
    data = deepseek_v3_shaped()
    data["ops"]["linear_attention"] = dict(STD)
    refused(data, "bad_value", "ops", "linear_attention")


def test_flavours_are_closed_sets():
    data = deepseek_v3_shaped()
    data["flavours"]["moe"]["ffn"] = "sparse"
    refused(data, "bad_value", "flavours.moe.ffn", "sparse")


def test_measured_bytes_must_be_finite_numbers_for_every_op():
    data = deepseek_v3_shaped()
    data["measured"]["moe"]["bytes_per_token"]["softmax"] = float("nan")
    refused(data, "bad_value", "measured.moe.bytes_per_token.softmax")
    data = deepseek_v3_shaped()
    del data["measured"]["dense"]["bytes_per_token"][OTHER]
    refused(data, "missing_field", "other")


def test_measured_forward_flops_are_a_count_and_may_be_absent():
    """Absent in specs of census version 8 and before, which the catalogue prices again."""
    data = deepseek_v3_shaped()
    data["measured"]["moe"]["forward_flops"] = 12_345_678_901_234
    assert ModelSpec(data)["measured"]["moe"]["forward_flops"] == 12_345_678_901_234
    for bad in (-1, 1.5e12, "1e12"):
        data["measured"]["moe"]["forward_flops"] = bad
        refused(data, "bad_value", "measured.moe.forward_flops")


def test_a_measured_working_set_states_widths_dtypes_and_net_counts():
    """Absent in specs of census version 17 and before, which the catalogue prices again."""
    data = deepseek_v3_shaped()
    data["measured"]["moe"]["working_set"] = {"widths": [[7168, "compute", 1], [57344, "float32", 3], [8, "int64", -1]], "constant_bytes": 0}
    assert ModelSpec(data)["measured"]["moe"]["working_set"]["widths"][1] == [57344, "float32", 3]
    for bad in ([0, "compute", 1], [7168, "", 1], [7168, "compute", 0], [7168, "compute", 1.5], [7168, "compute"]):
        data["measured"]["moe"]["working_set"] = {"widths": [bad], "constant_bytes": 0}
        refused(data, "bad_value", "measured.moe.working_set.widths[0]")
    data["measured"]["moe"]["working_set"] = {"widths": []}
    refused(data, "missing_field", "constant_bytes")


def test_params_parts_are_fixed():
    data = deepseek_v3_shaped()
    data["params"]["kinds"]["moe"]["experts"] = 1
    refused(data, "bad_value", "params.kinds.moe", "experts")


def test_bad_json_text_is_a_bad_json_refusal():
    with pytest.raises(SpecError) as info:
        ModelSpec.from_json('{"name": ')
    assert info.value.reason == "bad_json"


def test_spec_error_reasons_are_closed_and_survive_pickling():
    with pytest.raises(ValueError, match="unknown SpecError reason"):
        SpecError("oops", "x")
    err = pickle.loads(pickle.dumps(SpecError("too_large", "hidden_size: 10^9 > bound")))
    assert (err.reason, str(err)) == ("too_large", "hidden_size: 10^9 > bound")
    assert err.as_dict() == {"reason": "too_large", "message": "hidden_size: 10^9 > bound"}
    assert {"bad_json", "remote_code", "unknown_model_type", "missing_field", "bad_value",
            "unsupported_layer", "kind_conflict", "too_large", "census_failed"} <= set(REASONS)


def test_validation_does_not_mutate_input():
    data = deepseek_v3_shaped()
    before = copy.deepcopy(data)
    ModelSpec(data)
    assert data == before
