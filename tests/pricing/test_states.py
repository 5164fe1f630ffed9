"""Model states per rank: states.yaml's recipes and sharding rows (catalogue/records/states.py),
and what a rank of each pipeline stage holds as the planner's SQL works it out (the macro
rank_stages, through tests/support/rank_stages.py), each figure against a formula worked by
hand here from the model's published dims."""

from __future__ import annotations

import json

import pytest
from conftest import load_shipped
from support.pricing_specs import GPT3_175B_SHAPE
from support.rank_stages import stage_states

from speccat.catalogue.records.candidates import Layout
from speccat.catalogue.records.states import StatesError, active_params, load_states, total_params


@pytest.fixture(scope="module")
def states():
    return load_states()


@pytest.fixture(scope="module")
def gpt3_175b(tmp_path_factory) -> dict:
    """A GPT-3 175B shape (Brown et al. 2020, table 2.1: h 12288, 96 layers, 96 heads) built as
    gpt_neox: rotary positions, biases and LayerNorms, the vocabulary 50432, an untied output."""
    from speccat.flows.fit_spec import censused_now

    folder = tmp_path_factory.mktemp("gpt3")
    (folder / "config.json").write_text(json.dumps({**GPT3_175B_SHAPE, "num_hidden_layers": 96}))
    return censused_now(str(folder))[1]


def test_megatron_bytes_per_parameter_are_the_documented_18(states):
    assert sum(states.bytes_per_param().values()) == 18  # Megatron Core distrib_optimizer table


def test_gpt3_175b_at_tp8_pp8_with_18_bytes_per_parameter(gpt3_175b):
    h, vocab, tp, pp = 12288, 50432, 8, 8
    per_stage = 96 // pp  # 12 layers
    layer = (12 * h * h + 9 * h) / tp + 4 * h  # projections and biases split over tp, the two LayerNorms whole
    first = 18 * (per_stage * layer + vocab * h / tp)  # the embedding split over tp
    last = 18 * (per_stage * layer + 2 * h + vocab * h / tp)  # the final norm whole, the output split over tp
    got = stage_states(gpt3_175b, Layout(tp=tp, pp=pp))
    assert len(got) == pp
    assert got[0]["total"] == pytest.approx(first, rel=1e-12)
    assert got[-1]["total"] == pytest.approx(last, rel=1e-12)
    assert [s["total"] for s in got[1:-1]] == pytest.approx([18 * per_stage * layer] * (pp - 2), rel=1e-12)
    assert first / 2**30 == pytest.approx(46.87, abs=0.01)  # ≈ 2.80 B parameters × 18 bytes


def test_the_distributed_optimizer_is_6_plus_12_over_d(gpt3_175b):
    d = 16
    one = stage_states(gpt3_175b, Layout(tp=8, pp=8))[0]
    sharded = stage_states(gpt3_175b, Layout(tp=8, pp=8, dp=d, zero=1))[0]
    params = one["total"] / 18
    assert sharded["total"] == pytest.approx(params * (6 + 12 / d), rel=1e-12)


def llama_70b_params() -> float:
    c = load_shipped("meta-llama/Llama-3.1-70B-Instruct")
    h, hff, a, kv, vocab, layers = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"], c["num_hidden_layers"]
    dh = h // a
    per_layer = 2 * h * a * dh + 2 * h * kv * dh + 3 * h * hff + 2 * h
    return 2 * vocab * h + h + layers * per_layer


def test_llama_70b_zero3_at_dp64(states):
    from speccat.census import run_census

    spec = run_census(load_shipped("meta-llama/Llama-3.1-70B-Instruct"), name="llama-70b")
    params = llama_70b_params()
    assert total_params(spec) == params == 70_553_706_496  # the published 70.6 B
    (got,) = stage_states(spec.to_dict(), Layout(dp=64, zero=3))
    assert got["total"] == pytest.approx(18 * params / 64, rel=1e-12)
    assert got["weight"] == pytest.approx(2 * params / 64, rel=1e-12)
    # ZeRO-2 keeps the bf16 weights whole: 2Ψ + 16Ψ/64
    assert stage_states(spec.to_dict(), Layout(dp=64, zero=2))[0]["total"] == pytest.approx(2 * params + 16 * params / 64, rel=1e-12)
    # the ZeRO paper's own recipe, stage 3: (2 + 2 + 12)Ψ / Nd
    zero_paper = stage_states(spec.to_dict(), Layout(dp=64, zero=3), recipe="zero_mixed_adam")[0]["total"]
    assert zero_paper == pytest.approx(16 * params / 64, rel=1e-12)


def qwen3_30b_a3b() -> dict:
    c = load_shipped("Qwen/Qwen3-30B-A3B")
    h, a, kv, dh, n, k, w, vocab, layers = (c[x] for x in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "vocab_size", "num_hidden_layers"))
    kind = {"attention": 2 * h * a * dh + 2 * h * kv * dh, "ffn_routed": n * 3 * h * w, "ffn_router": n * h, "norm": 2 * h + 2 * dh}
    return {"layers": [{"kind": "decoder", "count": layers}], "num_experts": n, "num_experts_per_tok": k,
            "params": {"embedding": vocab * h, "output": vocab * h, "final_norm": h, "kinds": {"decoder": kind}}}  # fmt: skip


def test_moe_active_parameters_count_top_k_of_the_routed_experts(states):
    spec = qwen3_30b_a3b()
    kind = spec["params"]["kinds"]["decoder"]
    by_hand = 2 * 151936 * 2048 + 2048 + 48 * (kind["attention"] + kind["ffn_router"] + kind["norm"] + kind["ffn_routed"] * 8 / 128)
    assert active_params(spec, states) == pytest.approx(by_hand, rel=1e-12)
    assert 3.3 <= active_params(spec, states) / 1e9 < 3.4  # the model card's "3.3B activated"
    assert total_params(spec) / 1e9 == pytest.approx(30.5, abs=0.05)  # and "30.5B in total"


def test_routed_experts_shard_over_ep_and_their_states_over_the_expert_data_group():
    from speccat.census import run_census

    spec = run_census(load_shipped("Qwen/Qwen3-30B-A3B"), name="qwen3-30b-a3b").to_dict()
    routed = 48 * spec["params"]["kinds"][spec["layers"][0]["kind"]]["ffn_routed"]
    assert routed == 48 * 128 * 3 * 2048 * 768  # 48 layers of 128 experts, each three 2048 × 768 projections
    base = stage_states(spec, Layout(dp=8))[0]["total"]
    ep8 = stage_states(spec, Layout(dp=8, ep=8))[0]["total"]
    assert base == pytest.approx(18 * total_params(spec), rel=1e-12)
    assert base - ep8 == pytest.approx(18 * routed * (1 - 1 / 8), rel=1e-12)
    # ZeRO-1 with ep 8 of dp 8: the expert data-parallel group is dp·cp·t/(ep·etp) = 1 rank
    assert stage_states(spec, Layout(dp=8, ep=8, zero=1))[0]["total"] - ep8 == pytest.approx(-12 * (base / 18 - routed) * 7 / 8, rel=1e-9)


def test_stages_split_the_stack_in_order(gpt3_175b):
    """96 layers on 7 stages: 14, 14, 14, 14, 14, 13, 13 (earlier stages one more); a stage's
    states are its layers' (and the ends' groups on the first and last)."""
    h, tp = 12288, 1
    layer = 18 * ((12 * h * h + 9 * h) / tp + 4 * h)
    got = [s["total"] for s in stage_states(gpt3_175b, Layout(pp=7))]
    assert got[1:-1] == pytest.approx([14 * layer] * 4 + [13 * layer], rel=1e-12)


def test_the_catalogues_sharding_rows_read_each_divisor_as_powers_of_the_layout(tmp_path):
    """state_sharding (the view rank_fits' states.yaml): routed experts' data divisor
    dp·cp·t/(ep·etp) is dp, cp and t to the power 1 and ep, etp to -1; a divisor that is no
    such product (a sum) is refused, not stored wrong."""
    from speccat.catalogue.records.states import STATES_PATH, StatesError, state_sharding_rows

    rows = state_sharding_rows(load_states())
    routed = next(r for r in rows if r["group"] == "ffn_routed" and r["state"] == "optimizer" and r["default_recipe"])
    assert {k: v for k, v in routed.items() if k.startswith("data_")} == {"data_t": 1, "data_cp": 1, "data_dp": 1, "data_ep": -1, "data_etp": -1}
    assert {k: v for k, v in routed.items() if k.startswith("model_")} == {"model_t": 0, "model_cp": 0, "model_dp": 0, "model_ep": 1, "model_etp": 1}
    assert routed["bytes_per_param"] == 12 and routed["sharded_from"] == 1
    assert {r["sharded_from"] for r in rows if r["state"] == "weight"} == {3}
    assert len(rows) == 5 * 12 * 3  # five recipes, twelve groups, three states
    changed = tmp_path / "states.yaml"
    changed.write_text(STATES_PATH.read_text().replace("attention:  {model: t, data: dp*cp}", "attention:  {model: t, data: dp+cp}"))
    with pytest.raises(StatesError, match="groups.attention.data"):
        state_sharding_rows(load_states(changed))


def test_every_recipe_is_its_sources_bytes_per_parameter(states):
    """Each recipe of states.yaml against its source's arithmetic, worked here: Megatron Core's
    "float16 param, fp32 grads" 18; ZeRO's mixed-precision Adam 2 + 2 + 12 = 16; pure bf16 Adam,
    torch.optim.Adam's two moments in the parameter's dtype, 2 + 2 + 2·2 = 8; 8-bit Adam, two
    one-byte states and one fp32 constant per block of 2048 each, 2 + 2 + 2·(1 + 4/2048);
    SGD with momentum under Megatron's mixed precision, 2 + 4 + (4 fp32 main weight + 4 fp32
    momentum buffer) = 14. Every recipe names its source."""
    expected = {
        "megatron_bf16_adam": (2, 4, 12),
        "zero_mixed_adam": (2, 2, 12),
        "pure_bf16_adam": (2, 2, 2 * 2),
        "adam_8bit": (2, 2, 2 * (1 + 4 / 2048)),
        "sgd_momentum": (2, 4, 4 + 4),
    }
    assert {name: tuple(r[s] for s in ("weight", "grad", "optimizer")) for name, r in states.recipes.items()} == expected
    assert states.default_recipe == "megatron_bf16_adam"
    assert set(states.sources) == set(expected) and all(len(text) > 40 for text in states.sources.values())


def test_a_recipe_without_its_source_is_refused(tmp_path):
    import yaml

    from speccat.catalogue.records.states import STATES_PATH

    data = yaml.safe_load(STATES_PATH.read_text())
    del data["recipes"]["pure_bf16_adam"]["source"]
    path = tmp_path / "states.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(StatesError) as err:
        load_states(path)
    assert err.value.reason == "missing_key" and "pure_bf16_adam" in str(err.value)
