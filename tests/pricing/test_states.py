"""Model states per rank (catalogue/records/states.py, states.yaml): each figure against a
formula worked by hand here from the model's published dims."""

from __future__ import annotations

import pytest
from conftest import load_shipped

from speccat.catalogue.records.states import (
    Layout, StatesError, active_params, layout_shares, load_states, rank_states, stage_kinds, stage_params,
    stage_states, total_params,
)


@pytest.fixture(scope="module")
def states():
    return load_states()


def gpt3_175b() -> dict:
    """GPT-3 175B (Brown et al. 2020, table 2.1): h 12288, 96 layers, context 2048; the
    vocabulary padded to 51200 as Megatron pads it for tp 8. Biases and LayerNorms included."""
    h, layers, vocab, ctx = 12288, 96, 51200, 2048
    return {
        "hidden_size": h, "vocab_size": vocab,
        "layers": [{"kind": "decoder", "count": layers}],
        "tie_word_embeddings": True,
        "params": {
            "embedding": vocab * h + ctx * h,  # word and learned position embeddings
            "output": 0,  # tied
            "final_norm": 2 * h,
            "kinds": {"decoder": {"attention": 4 * h * h + 4 * h, "ffn_dense": 8 * h * h + 5 * h, "norm": 4 * h}},
        },
    }


def test_megatron_bytes_per_parameter_are_the_documented_18(states):
    assert sum(states.bytes_per_param().values()) == 18  # Megatron Core distrib_optimizer table


def test_gpt3_175b_at_tp8_pp8_with_18_bytes_per_parameter(states):
    h, vocab, ctx, tp, pp = 12288, 51200, 2048, 8, 8
    spec = gpt3_175b()
    layout = Layout(tp=tp, pp=pp)
    per_stage = 96 // pp  # 12 layers
    # first stage: 12 layers, projections and biases split over tp, norms replicated; the embedding split over tp
    first = 18 * (per_stage * ((12 * h * h + 9 * h) / tp + 4 * h) + (vocab + ctx) * h / tp)
    last = 18 * (per_stage * ((12 * h * h + 9 * h) / tp + 4 * h) + 2 * h + vocab * h / tp)  # final norm, the tied output's copy
    assert rank_states(spec, layout, states, stage=0)["total"] == pytest.approx(first, rel=1e-12)
    assert rank_states(spec, layout, states, stage=pp - 1)["total"] == pytest.approx(last, rel=1e-12)
    assert first / 2**30 == pytest.approx(46.95, abs=0.01)  # ≈ 2.80 B parameters × 18 bytes


def test_the_distributed_optimizer_is_6_plus_12_over_d(states):
    spec, d = gpt3_175b(), 16
    one = rank_states(spec, Layout(tp=8, pp=8), states)
    sharded = rank_states(spec, Layout(tp=8, pp=8, dp=d, zero=1), states)
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
    got = rank_states(spec, Layout(dp=64, zero=3), states)
    assert got["total"] == pytest.approx(18 * params / 64, rel=1e-12)
    assert got["weight"] == pytest.approx(2 * params / 64, rel=1e-12)
    # ZeRO-2 keeps the bf16 weights whole: 2Ψ + 16Ψ/64
    assert rank_states(spec, Layout(dp=64, zero=2), states)["total"] == pytest.approx(2 * params + 16 * params / 64, rel=1e-12)
    # the ZeRO paper's own recipe, stage 3: (2 + 2 + 12)Ψ / Nd
    assert rank_states(spec, Layout(dp=64, zero=3), states, recipe="zero_mixed_adam")["total"] == pytest.approx(16 * params / 64, rel=1e-12)


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


def test_routed_experts_shard_over_ep_and_their_states_over_the_expert_data_group(states):
    spec = qwen3_30b_a3b()
    routed = 48 * spec["params"]["kinds"]["decoder"]["ffn_routed"]
    base = rank_states(spec, Layout(dp=8), states)["total"]
    ep8 = rank_states(spec, Layout(dp=8, ep=8), states)["total"]
    assert base - ep8 == pytest.approx(18 * routed * (1 - 1 / 8), rel=1e-12)
    # ZeRO-1 with ep 8 of dp 8: the expert data-parallel group is dp·cp·t/(ep·etp) = 1 rank
    assert rank_states(spec, Layout(dp=8, ep=8, zero=1), states)["total"] - ep8 == pytest.approx(-12 * (base / 18 - routed) * 7 / 8, rel=1e-9)


def test_stages_split_the_stack_in_order():
    spec = {"layers": [{"kind": "dense", "count": 3}, {"kind": "moe", "count": 58}]}
    stages = stage_kinds(spec, 4)
    assert stages[0] == {"dense": 3, "moe": 13} and [sum(s.values()) for s in stages] == [16, 15, 15, 15]
    with pytest.raises(StatesError):
        stage_kinds(spec, 62)


def test_an_unknown_recipe_or_zero_stage_is_refused(states):
    with pytest.raises(StatesError):
        rank_states(gpt3_175b(), Layout(zero=4), states)
    with pytest.raises(StatesError):
        rank_states(gpt3_175b(), Layout(), states, recipe="sgd")


def test_the_batched_stage_states_are_rank_states_bit_for_bit(states):
    """`speccat fit` sums every layout's states at once (stage_states over layout_shares); each
    figure must be rank_states' own, bit for bit, for dense and MoE models under every ZeRO stage."""
    import numpy as np

    for spec in (gpt3_175b(), qwen3_30b_a3b()):
        pp = 4
        groups = [stage_params(spec, pp, i) for i in range(pp)]
        names = list(groups[0])
        counts = np.array([[g[n] for n in names] for g in groups])
        layouts = [Layout(dp=dp, tp=tp, pp=pp, ep=ep, zero=zero) for dp, tp, ep in ((1, 8, 1), (16, 4, 1), (8, 1, 8), (32, 2, 4)) for zero in (0, 1, 2, 3)]
        rows = layout_shares(states, layouts, names)
        batched = stage_states(counts, rows)  # [layout, stage, (weight, grad, optimizer, total)]
        for lay, got in zip(layouts, batched):
            for i, want in enumerate(rank_states(spec, lay, states, stage=None)):
                assert list(got[i]) == [want["weight"], want["grad"], want["optimizer"], want["total"]], (lay, i)
    with pytest.raises(StatesError):
        layout_shares(states, [Layout(), Layout(zero=4)], ["attention"])


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
    assert len(rows) == 5 * 10 * 3  # five recipes, ten groups, three states
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
