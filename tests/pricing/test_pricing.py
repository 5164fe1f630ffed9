"""Pricing: the names a layer reads (docs/pricing.md) and the prices of records v2.

Expected numbers are derived in each test from the shipped config's dims, step by step.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.pricing_specs import BUILDERS, deepseek_v2_lite, llama_8b, qwen3_30b_a3b, qwen15_moe, qwen35_9b

from speccat.catalogue.records.family_widths import family_widths
from speccat.catalogue.records.names import PricingError, layer_names
from speccat.catalogue.records.pricing import PriceTables, model_totals, price_layers, price_spec
from speccat.census.spec import REASONS as SPEC_REASONS
from speccat.census.structure.family import family_for, load_families


def names_of(spec, kind, grid, records, **overrides):
    return layer_names(spec, kind, grid.setting(overrides), records, grid.dtype_bytes)


def one(grid, **overrides):
    return grid.with_settings([grid.setting(overrides)])


# ------------------------------------------------------------------ names, one row each


def test_name_s_b_are_seq_length_and_micro_batch(records, grid):
    spec = llama_8b()
    names = names_of(spec, "decoder", grid, records, seq_length=8192, micro_batch=2)
    assert (names["s"], names["b"]) == (8192, 2)


def test_name_t_cp_are_tp_and_cp(records, grid):
    spec = llama_8b()
    names = names_of(spec, "decoder", grid, records, tp=4, cp=2)
    assert (names["t"], names["cp"]) == (4, 2)


def test_name_sp_is_t_with_sequence_parallel_else_1(records, grid):
    spec = llama_8b()
    assert names_of(spec, "decoder", grid, records, tp=4)["sp"] == 4
    assert names_of(spec, "decoder", grid, records, tp=4, sequence_parallel=False)["sp"] == 1


def test_name_h_is_hidden_size(records, grid):
    spec = llama_8b()
    assert names_of(spec, "decoder", grid, records)["h"] == 4096


def test_name_a_is_heads_or_linear_value_heads(records, grid):
    spec = qwen35_9b()
    assert names_of(spec, "full_attention", grid, records)["a"] == spec["num_attention_heads"] == 16
    assert names_of(spec, "linear_attention", grid, records)["a"] == spec["linear_num_value_heads"] == 32


def test_name_n_kv_is_kv_heads_or_a_or_the_linear_ratio(records, grid):
    spec = llama_8b()
    assert names_of(spec, "decoder", grid, records)["n_kv"] == 8
    no_kv = {k: v for k, v in spec.items() if k != "num_key_value_heads"}
    assert names_of(no_kv, "decoder", grid, records)["n_kv"] == 32  # = a
    spec = qwen35_9b()
    # linear kind: key heads × key dim / value dim = 16 × 128 / 128
    assert names_of(spec, "linear_attention", grid, records)["n_kv"] == 16 * 128 / 128


def test_name_dh_is_head_dim_or_h_over_a_or_v_head_dim_or_linear_value_dim(records, grid):
    spec = llama_8b()
    assert names_of(spec, "decoder", grid, records)["dh"] == 4096 / 32
    assert names_of(dict(spec, head_dim=96), "decoder", grid, records)["dh"] == 96
    spec = deepseek_v2_lite()
    assert names_of(spec, "moe", grid, records)["dh"] == spec["v_head_dim"] == 128
    spec = qwen35_9b()
    assert names_of(spec, "linear_attention", grid, records)["dh"] == 128
    spec = llama_8b()  # a value width apart from the query and key width, without MLA (mimo_v2_flash)
    names = names_of(dict(spec, head_dim=192, v_head_dim=128), "decoder", grid, records)
    assert (names["dh"], names["dqk"]) == (128, 192)


def test_a_kind_with_its_own_attention_dims_reads_them_in_place_of_the_model_wide_ones(records, grid):
    # llama-8b's one kind states gemma-4-style full-attention dims of its own: 8 heads, 2 kv heads, 512 wide
    spec = llama_8b()
    own = dict(spec, attention_dims={"decoder": {"num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 512}})
    names = names_of(own, "decoder", grid, records)
    assert (names["a"], names["n_kv"], names["dh"], names["dqk"], names["h"]) == (8, 2, 512, 512, 4096)
    # MLA dims stated by one kind only (dots3): the model-wide spec has none, the kind reads its own
    mla = {"num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 192, "v_head_dim": 128,
           "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128}  # fmt: skip
    names = names_of(dict(spec, attention_dims={"decoder": mla}), "decoder", grid, records)
    assert (names["a"], names["dh"], names["dqk"], names["dhr"], names["dc_kv"], names["dc_q"]) == (16, 128, 192, 64, 512, 0)


def test_names_dhr_dc_kv_dc_q_are_the_mla_dims_or_the_records_defaults(records, grid):
    spec = deepseek_v2_lite()
    names = names_of(spec, "moe", grid, records)
    # q_lora_rank is null in the config, so absent from the spec: the records' default 0
    assert (names["dhr"], names["dc_kv"], names["dc_q"]) == (64, 512, 0)
    spec = llama_8b()
    names = names_of(spec, "decoder", grid, records)
    assert (names["dhr"], names["dc_kv"], names["dc_q"]) == (0, 0, 0)
    assert dict(records.defaults) == {"sdpa_refused": 0, "dhr": 0, "dc_kv": 0, "dc_q": 0, "lin_block": 0}


def test_name_hff_is_the_dense_width_and_a_moe_kinds_expert_width(records, grid):
    spec = deepseek_v2_lite()
    assert names_of(spec, "dense", grid, records)["hff"] == spec["intermediate_size"] == 10944
    assert names_of(spec, "moe", grid, records)["hff"] == spec["moe_intermediate_size"] == 1408


def test_name_hff_exp_is_moe_intermediate_size_else_intermediate_size(records, grid):
    spec = qwen3_30b_a3b()
    assert names_of(spec, "decoder", grid, records)["hff_exp"] == 768
    spec = llama_8b()
    assert names_of(spec, "decoder", grid, records)["hff_exp"] == 14336


def test_names_of_experts_for_moe_and_dense_kinds(records, grid):
    spec = qwen15_moe()
    names = names_of(spec, "decoder", grid, records)
    # shared width 5632 in routed widths of 1408: 4 routed-width experts
    assert (names["n_exp"], names["n_chosen_exp"], names["n_shared_exp"]) == (60, 4, 5632 / 1408)
    spec = deepseek_v2_lite()
    assert names_of(spec, "moe", grid, records)["n_shared_exp"] == 2  # n_shared_experts, routed width
    assert [names_of(spec, "dense", grid, records)[n] for n in ("n_exp", "n_chosen_exp", "n_shared_exp")] == [1, 1, 0]
    spec = qwen3_30b_a3b()
    assert names_of(spec, "decoder", grid, records)["n_shared_exp"] == 0  # no shared expert


def test_names_cap_fact_gmm_dropless_tok_factor_come_from_the_setting(records, grid):
    spec = qwen3_30b_a3b()
    names = names_of(spec, "decoder", grid, records)
    assert (names["cap_fact"], names["gmm"], names["dropless_tok_factor"]) == (1, 1, 1)
    names = names_of(spec, "decoder", grid, records, capacity_factor=1.25, grouped_gemm=False, dropless_tok_factor=1.5)
    assert (names["cap_fact"], names["gmm"], names["dropless_tok_factor"]) == (1.25, 0, 1.5)


def test_name_fa_is_the_flash_attention_flag_and_megatron_the_stack(records, grid):
    spec = llama_8b()
    assert names_of(spec, "decoder", grid, records, seq_length=8192)["fa"] == 1
    assert names_of(spec, "decoder", grid, records, seq_length=8192, flash_attention=False)["fa"] == 0
    assert names_of(spec, "decoder", grid, records)["megatron"] == 0  # the default stack: transformers
    assert names_of(spec, "decoder", grid, records, stack="megatron")["megatron"] == 1


def test_names_bytes_compute_and_bytes_softmax(records, grid):
    spec = llama_8b()
    assert names_of(spec, "decoder", grid, records)["bytes_compute"] == 2  # bf16
    assert names_of(spec, "decoder", grid, records, dtype="fp32")["bytes_compute"] == 4


def test_names_bytes_softmax_and_bytes_dropout_are_the_family_profiles(records, grid):
    spec = llama_8b()
    names = names_of(spec, "decoder", grid, records)
    assert (names["bytes_softmax"], names["bytes_dropout"]) == (4, 0)  # default.yaml's softmax_bytes, dropout_bytes
    no_arch = {k: v for k, v in spec.items() if k != "arch"}
    with pytest.raises(PricingError) as err:
        names_of(no_arch, "decoder", grid, records)["bytes_softmax"]
    assert err.value.reason == "missing_field" and "arch" in str(err.value)


def test_family_widths_follow_the_census_family_of_each_model_type():
    for family in load_families().values():
        for model_type in (*family.match, f"{family.name}_variant", "no_such_family"):
            defaults = family_for(model_type).defaults
            assert family_widths(model_type) == {"bytes_softmax": defaults["softmax_bytes"], "bytes_dropout": defaults["dropout_bytes"]}


def test_names_n_op_are_the_kinds_op_counts(records, grid):
    spec = qwen35_9b()
    names = names_of(spec, "linear_attention", grid, records)
    counts = spec["ops"]["linear_attention"]
    assert {op: names[f"n_{op}"] for op in counts} == counts
    assert (names["n_attBMM"], names["n_linrec"]) == (0, 1)


def test_names_param_casts_follow_the_setting(records, grid):
    spec = llama_8b()
    names = names_of(spec, "decoder", grid, records)
    assert (names["n_attParamCast"], names["n_ffParamCast"]) == (0, 0)
    names = names_of(spec, "decoder", grid, records, param_casts=True)
    assert (names["n_attParamCast"], names["n_ffParamCast"]) == (4, 3)  # n_attMM, n_ffMM


def test_the_records_derived_names_are_evaluated_from_the_layers_names(records, grid):
    spec = llama_8b()  # RMSNorm upcasting its input, weight applied in bf16; 8 kv heads
    names = names_of(spec, "decoder", grid, records, tp=8, sequence_parallel=False)
    assert names["rep"] == 8 / 1  # t / sp: outside the tensor-parallel region every rank keeps it all
    assert names["kvr"] == 8  # n_kv = t: one kv head per rank
    assert names["norm_w"] == 4 + 2  # fp32 input, bf16 normalised input
    names = names_of(spec, "decoder", grid, records, tp=8)
    assert names["rep"] == 1
    names = names_of(spec, "decoder", grid, records, tp=16)
    assert names["kvr"] == 16  # t > n_kv: each rank keeps one replicated kv head
    assert names_of(spec, "decoder", grid, records, stack="megatron")["norm_w"] == 2  # megatron keeps the 2-byte input


def test_name_n_qknorm_is_1_for_qk_norm_in_full_attention_only(records, grid):
    spec = qwen35_9b()
    assert names_of(spec, "full_attention", grid, records)["n_qknorm"] == 1
    assert names_of(spec, "linear_attention", grid, records)["n_qknorm"] == 0
    spec = llama_8b()
    assert names_of(spec, "decoder", grid, records)["n_qknorm"] == 0


def test_name_micro_factor_is_in_flight(records, grid):
    spec = llama_8b()
    assert names_of(spec, "decoder", grid, records, in_flight=3)["micro_factor"] == 3


def test_name_kv_shards_is_cp_for_ulysses_or_a_recurrence_else_1(records, grid):
    spec = qwen35_9b()
    assert names_of(spec, "full_attention", grid, records, cp=4)["kv_shards"] == 1
    assert names_of(spec, "full_attention", grid, records, cp=4, cp_algo="ulysses")["kv_shards"] == 4
    assert names_of(spec, "linear_attention", grid, records, cp=4)["kv_shards"] == 4


def test_a_name_the_layer_cannot_supply_is_an_error_not_a_zero(records, grid):
    spec = llama_8b()
    no_ff = {k: v for k, v in spec.items() if k != "intermediate_size"}
    names = names_of(no_ff, "decoder", grid, records)
    assert names["h"] == 4096  # what it has still reads
    with pytest.raises(PricingError) as err:
        names["hff"]
    assert err.value.reason == "missing_field" and "intermediate_size" in str(err.value)
    with pytest.raises(PricingError) as err:
        price_layers(no_ff, records, one(grid))
    assert err.value.reason == "missing_field"
    assert err.value.reason in SPEC_REASONS  # booked as a failures row like a census refusal


def test_mla_without_v_head_dim_anywhere_is_an_error(records, grid):
    spec = deepseek_v2_lite()
    no_v = {k: v for k, v in spec.items() if k != "v_head_dim"}
    with pytest.raises(PricingError) as err:
        price_layers(no_v, records, one(grid))
    assert err.value.reason == "missing_field" and "v_head_dim" in str(err.value)


def test_a_spec_without_flavours_is_refused(records, grid):
    spec = llama_8b()
    with pytest.raises(PricingError) as err:
        price_layers({k: v for k, v in spec.items() if k != "flavours"}, records, one(grid))
    assert err.value.reason == "missing_field" and "flavours" in str(err.value)


# ------------------------------------------------------------------------ v2 prices


def layer(prices, kind: str, mask: int = 0, setting: int = 0) -> dict:
    k = prices.kinds.index(kind)
    return {p: float(prices.part(p)[k, setting, mask]) for p in ("attention", "ffn", "norm", "total")}


def test_llama_8b_acceptance(records, grid):
    spec = llama_8b()
    prices = price_layers(spec, records, one(grid))  # transformers, s=4096, b=1, tp=cp=1, bf16, flash
    s, h, a, kv, hff = 4096, 4096, 32, 8, 14336
    dh = h / a  # no head_dim in the config
    # attention: q/k/v_proj's input (the norm's output); the flash kernel's q, k, v and output;
    # one fp32 log-sum-exp per head; no dropout
    attention = 2 * h + 2 * (a * dh + kv * dh + kv * dh + a * dh) + 4 * a
    # unfused SwiGLU: gate/up's input, SiLU's input and output, up's output, down's input
    ffn = 2 * h + 2 * hff * 3 + 2 * hff
    # two RMSNorms, each its fp32 input, one fp32 rstd and the bf16 normalised input
    norm = 2 * (4 * h + 4 + 2 * h)
    assert (attention, ffn, norm) == (28_800, 122_880, 49_160)
    assert attention + ffn + norm == 200_840  # measured by a real forward on CPU and on an H200
    assert layer(prices, "decoder") == {
        "attention": s * 28_800, "ffn": s * 122_880, "norm": s * 49_160, "total": s * 200_840,
    }  # fmt: skip
    everything = records.mask_of(records.switches)
    # all eight recomputed: only attMM (the projections' inputs) and ffMM stay
    kept = s * (2 * h) + s * (2 * h + 2 * hff * 3)
    assert layer(prices, "decoder", everything)["total"] == kept == 419_430_400
    assert prices.full[0, 0] == 2 * s * h == 33_554_432  # full recompute keeps the input
    totals = model_totals(spec, price_spec(spec, records, one(grid)))
    by_mask = {r["mask"]: r["total"] for r in totals.layer_prices.to_pylist()}
    assert (by_mask[0], by_mask[everything]) == (32 * s * 200_840, 32 * 419_430_400)
    assert totals.full_prices.column("kept").to_pylist() == [32 * 33_554_432]


def test_moe_routed_shared_and_router_slots(records, grid):
    spec = qwen15_moe()
    prices = price_layers(spec, records, one(grid))
    s, h, e, k, hexp, hsh = 4096, 2048, 60, 4, 1408, 5632
    # per chosen expert: the gathered input, SiLU's output and the product, the down output,
    # the bf16 routing weight, three int64 sort/gather indices; SiLU's input (gate_up's output)
    expert_mm = 2 * h + 2 * hexp * 2 + 2 * h + 2 + 8 * 3
    expert_act = 2 * hexp * 2
    routed = s * k * (expert_mm + expert_act)  # dropless grouped GEMM: every token's k experts
    # the shared expert: its input, SiLU's output, up's output, the product; the shared gate's
    # sigmoid output and the gated product; SiLU's input
    shared = s * (2 * h + 3 * 2 * hsh + 2 + 2 * h + 2 * hsh)
    # the router: its input is the shared expert's (counted there); fp32 scores of every
    # expert; the chosen indices
    router = s * (4 * e + 8 * k)
    assert layer(prices, "decoder")["ffn"] == routed + shared + router
    # ffAct recomputed drops the activations' inputs, routed and shared
    act = records.mask_of(["ffAct"])
    assert layer(prices, "decoder")["ffn"] - layer(prices, "decoder", act)["ffn"] == s * k * expert_act + s * 2 * hsh


def test_moe_without_shared_experts_and_with_qk_norm(records, grid):
    spec = qwen3_30b_a3b()
    got = layer(price_layers(spec, records, one(grid)), "decoder")
    s, h, a, kv, dh, e, k, hexp = 4096, 2048, 32, 4, 128, 128, 8, 768
    routed = s * k * ((2 * h + 2 * hexp * 2 + 2 * h + 2 + 8 * 3) + 2 * hexp * 2)
    # the router keeps its bf16 input, fp32 scores of every expert, the chosen indices, and
    # the renormalisation's fp32 sum and quotient
    router = s * (2 * h + 4 * e + 8 * k + 4 + 4 * k)
    assert got["ffn"] == routed + router == 489_897_984
    # two norms of h plus q- and k-norm per head of dh: fp32 input, bf16 output, an rstd per head
    assert got["norm"] == s * (2 * (6 * h + 4) + 6 * (a + kv) * dh + 4 * (a + kv)) == 214_532_096


def test_mla_attention_and_the_attup_switch(records, grid):
    spec = deepseek_v2_lite()
    prices = price_layers(spec, records, one(grid))
    s, h, a, dqk, dhr, dv, dc_kv = 4096, 2048, 16, 192, 64, 128, 512
    # q_proj and kv_a's input; o_proj's copy of the heads-major output (q is built by cat)
    att_mm = 2 * h + 2 * a * dv
    att_up = 2 * dc_kv  # kv_b_proj's input: the latent norm's output (no q latent)
    # the kernel keeps q and k (a heads of nope + rope), v as a view of kv_b's output (its
    # whole base: k_nope and v per head), and its output; one fp32 lse per head
    kernel = 2 * (a * dqk + a * dqk + a * (dqk - dhr + dv) + a * dv)
    assert (att_mm, att_up, kernel) == (8192, 1024, 24576)
    for kind in ("dense", "moe"):
        assert layer(prices, kind)["attention"] == s * (att_mm + att_up + kernel + 4 * a)
        up = records.mask_of(["attUp"])
        assert layer(prices, kind)["attention"] - layer(prices, kind, up)["attention"] == s * att_up
        # two RMSNorms of h and the kv latent's: fp32 input, bf16 output, one rstd each
        assert layer(prices, kind)["norm"] == s * (2 * (6 * h + 4) + 6 * dc_kv + 4)
    dense_ffn = s * (2 * h + 2 * 10944 * 3 + 2 * 10944)
    assert layer(prices, "dense")["ffn"] == dense_ffn


def test_linear_attention_and_cp(records, grid):
    spec = qwen35_9b()
    prices = price_layers(spec, records, one(grid, cp=2))
    s, h, cp, hff = 4096, 4096, 2, 12288
    a, dh, n_kv, n_lkh = 32, 128, 16, 16  # value heads, their width; key heads in value-width units
    conv = 2 * n_kv * dh + a * dh
    # the projections' input; the causal-conv1d kernel's input (it recomputes the conv and its
    # SiLU); beta's sigmoid, the decay's fp32 softplus input and output; out_proj's input
    att_mm = 2 * h + 2 * conv + 2 * a + 2 * 4 * a + 2 * a * dh
    # the delta rule: normalised q and k, their fp32 inverse norms, v (its own contiguous copy),
    # the fp32 chunk decay, the WY matrix of 64 columns
    linrec = 2 * 2 * n_kv * dh + 2 * 4 * n_lkh + 2 * a * dh + 4 * a + 2 * a * 64
    # context parallelism divides every element: each rank holds s / cp of the sequence
    assert layer(prices, "linear_attention")["attention"] == s * (att_mm + linrec) / cp
    assert layer(prices, "linear_attention")["ffn"] == s * (2 * h + 2 * hff * 3 + 2 * hff) / cp
    # the gated output norm (fp32 input, bf16 normalised, fp32 rstd per head, the gate's fp32
    # SiLU input and output, the bf16 product) and two RMSNorms applying their weight in fp32
    gated = (4 + 2 + 2 * 4 + 2) * a * dh + 4 * a
    assert layer(prices, "linear_attention")["norm"] == s * (gated + 2 * (8 * h + 4)) / cp
    # the full attention kind: 16 heads of 256, 4 kv heads, an output gate, q heads-major
    fa, fkv, fdh = 16, 4, 256
    full = 2 * h + 2 * fa * fdh * (1 + 2) + 2 * (fa * fdh + 2 * fkv * fdh + fa * fdh) + 4 * fa
    assert layer(prices, "full_attention")["attention"] == s * full / cp


def test_sequence_parallel_off_keeps_the_regions_outside_tp_whole(records, grid):
    spec = llama_8b()
    s, h, a, kv, hff, t = 4096, 4096, 32, 8, 14336, 8
    dh = h / a
    inside = 2 * (a * dh + 2 * kv * dh + a * dh) + 4 * a + 2 * hff * 3 + 2 * hff  # split over t
    outside = 2 * h + 2 * h + 2 * (6 * h + 4)  # the projections' inputs and the norms
    with_sp = layer(price_layers(spec, records, one(grid, tp=t)), "decoder")["total"]
    without = layer(price_layers(spec, records, one(grid, tp=t, sequence_parallel=False)), "decoder")["total"]
    assert with_sp == s * (inside + outside) / t
    assert without == s * (inside / t + outside)


def test_price_tables_have_the_agreed_columns(records, grid):
    spec = deepseek_v2_lite()
    tables = price_spec(spec, records, grid)
    assert isinstance(tables, PriceTables)
    lp, fp = tables.layer_prices, tables.full_prices
    assert lp.column_names == ["kind", "setting_id", "mask", "attention", "ffn", "norm", "total"]
    assert str(lp.schema.field("mask").type) == "int16" and str(lp.schema.field("total").type) == "double"
    n = len(grid.settings)
    assert n == 2 * 3 * 4 * 4  # stack × seq_length × tp × cp
    assert lp.num_rows == 2 * n * 256 and fp.num_rows == 2 * n
    assert fp.column_names == ["kind", "setting_id", "kept", "backward_peak"]
    row = lp.slice(n * 256 + 5 * 256 + 7, 1).to_pylist()[0]  # moe kind, 6th setting, mask 7
    assert (row["kind"], row["setting_id"], row["mask"]) == ("moe", grid.settings[5]["setting_id"], 7)


def test_model_totals_sum_count_times_layer_bytes(records, grid):
    spec = deepseek_v2_lite()
    prices = price_layers(spec, records, grid)
    totals = model_totals(spec, prices.to_tables())
    rows = totals.layer_prices.to_pylist()
    assert len(rows) == len(grid.settings) * 256
    for row in rows[:: 36 * 8 + 1]:
        i, mask = [s["setting_id"] for s in grid.settings].index(row["setting_id"]), row["mask"]
        expected = 1 * prices.total[0, i, mask] + 26 * prices.total[1, i, mask]  # 1 dense + 26 moe
        assert row["total"] == pytest.approx(expected, rel=1e-15)
    full = {r["setting_id"]: r["kept"] for r in totals.full_prices.to_pylist()}
    assert full[grid.settings[3]["setting_id"]] == pytest.approx(prices.full[0, 3] + 26 * prices.full[1, 3])


# ------------------------------------------------------------------------ monotonicity


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_recomputing_one_more_switch_never_increases_bytes(records, grid, build):
    spec = build()
    total = price_layers(spec, records, grid).total  # (kind, setting, mask)
    for bit in range(len(records.switches)):
        without = np.array([m for m in range(256) if not m >> bit & 1])
        assert np.all(total[:, :, without | 1 << bit] <= total[:, :, without])


@pytest.mark.parametrize("build", [llama_8b, qwen15_moe, qwen35_9b], ids=lambda b: b.__name__)
def test_attup_changes_nothing_without_mla(records, grid, build):
    spec = build()
    total = price_layers(spec, records, grid).total
    without = np.array([m for m in range(256) if not m >> 7 & 1])
    assert records.switches[7] == "attUp"
    assert np.array_equal(total[:, :, without | 128], total[:, :, without])


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_tp_and_cp_never_increase_bytes(records, grid, build):
    spec = build()
    prices = price_layers(spec, records, grid)
    at = {(s["seq_length"], s["tp"], s["cp"]): i for i, s in enumerate(grid.settings)}
    for (seq, tp, cp), i in at.items():
        for more_tp in (t for t in (1, 2, 4, 8) if t > tp):
            assert np.all(prices.total[:, at[seq, more_tp, cp]] <= prices.total[:, i])
            assert np.all(prices.full[:, at[seq, more_tp, cp]] <= prices.full[:, i])
        for more_cp in (c for c in (1, 2, 4) if c > cp):
            assert np.all(prices.total[:, at[seq, tp, more_cp]] <= prices.total[:, i])
