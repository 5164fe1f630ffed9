"""Registry coverage (issue 12): facts the census reads from the built model, never from one field name.

- The hidden size is the layers' width (the hidden states they are called with), not the
  embedding's: electra and rembert project narrower embeddings up to the layers.
- The layer count is the built stack's length; a flat config must state it, under
  num_hidden_layers or as any field equal to it (longcat_flash's num_layers, nemotron_h's
  hybrid_override_pattern), never only through its class's default.
"""

from __future__ import annotations

import pytest
import torch
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from speccat.census import run_census
from speccat.census.intake.checks import check_stack_length
from speccat.census.spec import SpecError


def stack(spec):
    return [(g["kind"], g["count"]) for g in spec["layers"]]


@pytest.mark.parametrize(
    "model_type, embedding_field",
    [("electra", "embedding_size"), ("rembert", "input_embedding_size")],
)
def test_the_hidden_size_is_the_layers_width_where_embeddings_are_projected(model_type, embedding_field):
    # embeddings 32 wide, projected to layers 64 wide: 4 heads of 16, a 128-wide MLP, 2 layers
    config = {
        "model_type": model_type, "hidden_size": 64, embedding_field: 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
    }  # fmt: skip
    spec = run_census(config, name=f"tiny/{model_type}", seq_length=32)
    assert spec["hidden_size"] == 64 and spec["intermediate_size"] == 128
    assert spec["num_attention_heads"] == 4 and spec["head_dim"] == 16
    assert [count for _, count in stack(spec)] == [2]
    assert spec["params"]["embedding"] == 100 * 32  # the word table is 32 wide, not 64


def test_a_layer_count_stated_under_another_name_is_read_from_the_built_stack():
    longcat = CONFIG_MAPPING["longcat_flash"]()
    check_stack_length({"num_layers": 28, "hidden_size": 6144}, longcat, 28, nested=False)
    check_stack_length({"hybrid_override_pattern": "M-M*"}, CONFIG_MAPPING["nemotron_h"](), 4, nested=False)
    with pytest.raises(SpecError) as err:
        check_stack_length({"num_layers": 27, "hidden_size": 6144}, longcat, 28, nested=False)
    assert err.value.reason == "missing_field" and "num_hidden_layers" in str(err.value)
    check_stack_length({}, longcat, 28, nested=True)  # a nested text_config leans on its class defaults


def test_a_flat_config_that_states_no_layer_count_is_refused_after_the_build():
    # llama's class default (32 layers) is not what the config states
    config = dict(model_type="llama", hidden_size=64, num_attention_heads=4, vocab_size=100, intermediate_size=128)
    with pytest.raises(SpecError) as err:
        run_census(config, name="tiny/llama-no-layers", seq_length=32)
    assert err.value.reason == "missing_field" and "num_hidden_layers" in str(err.value) and "32 layers" in str(err.value)
    spec = run_census(dict(config, num_hidden_layers=3), name="tiny/llama", seq_length=32)
    assert sum(count for _, count in stack(spec)) == 3


def test_longcat_flash_passes_the_layer_count_and_runs_its_layers():
    """Its layer count is num_layers, the stack's length (num_hidden_layers, 2 × num_layers, is
    derived and not in its dict). At 32 tokens its 32 × 12 slots reach the first 384 of its
    768 candidates at even loads, one each, all experts that compute: each runs its SiLU once."""
    data = CONFIG_MAPPING["longcat_flash"]().to_dict()
    assert "num_hidden_layers" not in data and data["num_layers"] == 28
    spec = run_census({**data, "model_type": "longcat_flash", "num_layers": 2}, name="tiny/longcat", seq_length=32).to_dict()
    assert spec["num_hidden_layers"] == 2 and sum(count for _, count in stack(spec)) == 2
    assert spec["ops"][spec["layers"][0]["kind"]]["ffAct"] == 1


def test_a_class_without_a_layer_count_needs_none():
    # blt's config class has no num_hidden_layers (its sub-stacks each state their own)
    check_stack_length({}, CONFIG_MAPPING["blt"](), 25, nested=False)


def test_routed_experts_without_a_top_k_are_a_bad_value_before_the_build():
    # deepseek_v2's class defaults: 64 routed experts, num_experts_per_tok None (transformers builds
    # it, and its router then calls topk with k=None)
    data = CONFIG_MAPPING["deepseek_v2"]().to_dict()
    assert data["n_routed_experts"] == 64 and data["num_experts_per_tok"] is None
    with pytest.raises(SpecError) as err:
        run_census({**data, "model_type": "deepseek_v2"}, name="deepseek_v2", seq_length=32)
    assert err.value.reason == "bad_value" and str(err.value).startswith("num_experts_per_tok: null")
    stated = {"num_experts_per_tok": 6, "num_hidden_layers": 2, "moe_intermediate_size": 1408}  # 1407 is no grouped_mm stride
    spec = run_census({**data, "model_type": "deepseek_v2", **stated}, name="deepseek_v2/k6", seq_length=32)
    assert spec["num_experts_per_tok"] == 6 and spec["num_experts"] == 64


def _registry_spec(model_type: str):
    from bench.bench_registry import default_config

    return run_census(default_config(model_type), name=model_type, seq_length=256)  # as bench/bench_registry.py


def _counts(spec) -> dict[str, int]:
    out: dict[str, int] = {}
    for kind, count in stack(spec):
        out[kind] = out.get(kind, 0) + count
    return out


def _dims(spec, kind) -> tuple:
    own = spec.get("attention_dims", {}).get(kind, spec)
    return own["num_attention_heads"], own["num_key_value_heads"], own["head_dim"], own.get("v_head_dim")


def test_mimo_v2_flash_sliding_layers_state_their_doubled_kv_heads():
    # defaults: 48 layers, full attention at layer 0 and every 6th (5, 11, ..., 47: 9 in all), layer 0
    # a dense MLP; 64 heads, 4 kv heads (doubled to 8 in sliding layers), q/k 192 wide, v 128 wide
    spec = _registry_spec("mimo_v2_flash")
    assert _counts(spec) == {"full_dense": 1, "full_moe": 8, "sliding_moe": 39}
    assert _dims(spec, "full_dense") == _dims(spec, "full_moe") == (64, 4, 192, 128)
    assert _dims(spec, "sliding_moe") == (64, 8, 192, 128)
    assert set(spec["attention_dims"]) == {"sliding_moe"}


def test_gemma4_unified_full_layers_state_their_wider_heads():
    # defaults: 30 layers, full attention every 6th (5, 11, 17, 23, 29); 8 heads, 4 kv heads, 256 wide,
    # per_layer_config widening the full layers' heads to 512
    spec = _registry_spec("gemma4_unified_text")
    assert _counts(spec) == {"sliding_dense": 25, "full_dense": 5}
    assert _dims(spec, "sliding_dense") == (8, 4, 256, None) and _dims(spec, "full_dense") == (8, 4, 512, None)


def test_dots3_mla_layers_of_two_widths_each_state_their_latent_dims():
    # defaults: 46 layers; indexed (full) at 0, 1 and every 4th from 5 (13 in all), the rest sliding;
    # layer 0 dense. Indexed: 128 heads, kv rank 512, nope 128 + rope 64 = 192, v 128. Sliding
    # (per_layer_config): 64 heads, kv rank 1024, nope 192 + rope 64 = 256. q rank 1024 for both.
    spec = _registry_spec("dots3_note_text")
    assert _counts(spec) == {"full_dense": 1, "full_moe": 12, "sliding_moe": 33}
    assert (spec["num_attention_heads"], spec["head_dim"], spec["kv_lora_rank"], spec["qk_nope_head_dim"]) == (128, 192, 512, 128)
    own = spec["attention_dims"]["sliding_moe"]
    assert (own["num_attention_heads"], own["head_dim"], own["kv_lora_rank"], own["qk_nope_head_dim"], own["qk_rope_head_dim"]) == (64, 256, 1024, 192, 64)
    assert own["v_head_dim"] == 128 and own["q_lora_rank"] == 1024


def test_a_value_matmul_without_a_softmax_is_a_linear_attention_run_as_written():
    # minimax's lightning-attention layers multiply block scores q·kᵀ by a decay mask, then by v:
    # at the registry's 256 tokens one block of 256, s × s scores taken for softmax until the value
    # matmul shows none (tests/census/test_census_linear_eager.py checks what it keeps)
    spec = _registry_spec("minimax")
    assert _counts(spec) == {"full_moe": 16, "linear_eager_moe": 16}
    assert spec["flavours"]["linear_eager_moe"]["attention"] == "linear_eager"
    assert (spec["linear_eager_heads"], spec["linear_eager_head_dim"], spec["linear_eager_block"]) == (32, 128, 256)


@pytest.mark.parametrize(
    "config, where, op",
    [
        # xmod's language adapters select each language's tokens with aten.nonzero, from embeddings
        # and from ids alike (gemma-4's per-layer inputs, which need it only from embeddings, run from ids)
        (dict(model_type="xmod", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=100,
              is_decoder=True, languages=["en_XX", "de_DE"], default_language="en_XX"),
         "lang_adapter", "aten.nonzero"),
        # dynamic rope recomputes its frequencies from the longest position, read with .item()
        (dict(model_type="llama", hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=100, intermediate_size=128,
              rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
         "dynamic_frequency_update", "aten._local_scalar_dense"),
    ],
    ids=["xmod-nonzero", "dynamic-rope-item"],
)  # fmt: skip
def test_code_that_needs_tensor_values_is_refused_naming_the_op_and_the_code(config, where, op):
    with pytest.raises(SpecError) as err:
        run_census(config, name=f"tiny/{config['model_type']}", seq_length=32)
    assert err.value.reason == "unsupported_layer"
    assert where in str(err.value) and op in str(err.value) and "fake tensors" in str(err.value)


def test_a_feed_forward_block_named_like_a_norm_is_not_a_norm():
    # roberta-prelayernorm's intermediate (a LayerNorm, then the up projection) and output blocks are
    # classes named RobertaPreLayerNorm*: they hold projections, so they are the feed-forward
    config = dict(model_type="roberta-prelayernorm", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, vocab_size=100, is_decoder=True)  # fmt: skip
    spec = run_census(config, name="tiny/roberta-prelayernorm", seq_length=32)
    assert spec["intermediate_size"] == 128 and spec["hidden_size"] == 64 and [c for _, c in stack(spec)] == [2]
    kind = spec.kinds[0]
    assert spec["ops"][kind]["ffMM"] == 2  # up and down
    # norms: the attention's pre-norm and the intermediate's pre-norm (64 weights + 64 biases each)
    assert spec["params"]["kinds"][kind]["norm"] == 2 * 2 * 64


def test_tensor_parallel_layouts_divide_every_kinds_heads():
    from speccat.catalogue.records.candidates import layouts

    spec = {"num_attention_heads": 32, "layers": [{"kind": "full", "count": 2}, {"kind": "sliding", "count": 2}]}
    assert {lay.tp for lay in layouts(8, spec, {}, [0], 8)} == {1, 2, 4, 8}
    own = dict(spec, attention_dims={"sliding": {"num_attention_heads": 12}})  # 12 heads: tp 8 cannot split them
    assert {lay.tp for lay in layouts(8, own, {}, [0], 8)} == {1, 2, 4}


def test_a_norm_is_named_as_one_and_a_block_that_only_carries_norm_in_its_name_is_not():
    from torch import nn

    from speccat.census.structure.predicates import is_norm

    class GatedRMSNorm(nn.Module):  # a norm with a gate MLP back to its own width (axk2)
        def __init__(self):
            super().__init__()
            self.norm, self.fc1, self.fc2 = nn.RMSNorm(64), nn.Linear(64, 4), nn.Linear(4, 64)

    class PreLayerNormIntermediate(nn.Module):  # a feed-forward half, named after its model (roberta-prelayernorm)
        def __init__(self):
            super().__init__()
            self.LayerNorm, self.dense = nn.LayerNorm(64), nn.Linear(64, 256)

    class PreLayerNormOutput(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(256, 64)

    class PreLayerNormAttention(nn.Module):  # keeps the width, yet an attention
        def __init__(self):
            super().__init__()
            self.LayerNorm, self.query, self.output = nn.LayerNorm(64), nn.Linear(64, 64), nn.Linear(64, 64)

    class LayerNorm1P(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(64))

    class PlainRMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(64))

    assert is_norm(GatedRMSNorm()) and is_norm(PlainRMSNorm()) and is_norm(LayerNorm1P())
    assert not any(is_norm(m) for m in (PreLayerNormIntermediate(), PreLayerNormOutput(), PreLayerNormAttention()))
