"""The fast pricing path equals the direct evaluator bit for bit (docs/pricing.md).

Both evaluators price the same (kind, setting, mask) grid; `LayerPrices.same_bits` compares
every float's bytes. Beyond the default grid and records v1, the grids and records below are
built to drive the fast path into each of its fallbacks (catalogue/records/fastpath.py), and the
tests assert that the fallback really is taken.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import yaml
from support.pricing_specs import BUILDERS, deepseek_v2_lite, llama_8b, qwen15_moe, qwen35_9b

from speccat.catalogue.records.fastpath import KindPricer, slot_plans
from speccat.catalogue.records.names import PricingError, kind_values
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.oprecords import RECORDS_PATH, parse_records, records_content
from speccat.catalogue.records.settings import SETTINGS_PATH, parse_settings


@pytest.fixture(scope="module")
def records():
    return parse_records(records_content(yaml.safe_load(RECORDS_PATH.read_text())), "records.yaml")


def assert_same(spec, records, grid):
    fast = price_layers(spec, records, grid, "fast")
    direct = price_layers(spec, records, grid, "direct")
    assert fast.same_bits(direct)
    return fast


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_fast_equals_direct_on_the_default_grid(records, grid, build):
    spec = build()
    assert_same(spec, records, grid)


def wide_grid():
    """Every field varied, values chosen to be awkward (odd tp, non-power-of-two lengths)."""
    data = yaml.safe_load(SETTINGS_PATH.read_text())
    fields = data["fields"]
    fields["seq_length"]["values"] = [3000, 4096]
    fields["micro_batch"]["values"] = [1, 3]
    fields["tp"]["values"] = [1, 3]
    fields["cp"]["values"] = [1, 2]
    for name in ("sequence_parallel", "flash_attention", "param_casts", "grouped_gemm"):
        fields[name]["values"] = [True, False]
    fields["cp_algo"]["values"] = ["ring", "ulysses"]
    fields["dtype"]["values"] = ["bf16", "fp32"]
    fields["in_flight"]["values"] = [1, 2]
    fields["dropless_tok_factor"]["values"] = [1, 1.1]
    fields["capacity_factor"]["values"] = [1.25]
    fields["stack"]["values"] = ["transformers", "megatron"]
    grid = parse_settings(data, "wide.yaml")
    assert len(grid.settings) == 2**13
    return grid


def sample(grid, count, seed):
    rng = np.random.default_rng(seed)
    return grid.with_settings([grid.settings[i] for i in sorted(rng.choice(len(grid.settings), count, replace=False))])


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_fast_equals_direct_on_a_grid_varying_every_field(records, build):
    spec = build()
    assert_same(spec, records, sample(wide_grid(), 48, seed=len(spec["name"])))


def test_the_wide_grid_drives_formulas_into_the_scalar_fallback(records):
    spec = qwen15_moe()
    grid = wide_grid()
    pricer = KindPricer(kind_values(spec, "decoder"), grid, records)
    assert {"gmm", "s", "t", "cp", "sp", "kv_shards", "rep", "kvr"} <= pricer.arrays
    routed = next(s for s in records.slots if s.name == "routed")
    # the routed slots it reads (routed_slots_at's `dropless_tok_factor if gmm else cap_fact`)
    # test a varying name: that derived name is left to the scalar path
    assert "routed_slots_at" in routed.formula.names and "routed_slots_at" in pricer.unavailable
    attention = next(s for s in records.slots if s.name == "attention")
    assert attention.formula.elementwise(pricer.arrays_total)
    assert all(e.elementwise(pricer.arrays_total) for _, e in attention.elements)


def test_the_default_grid_runs_every_records_expression_over_arrays(records, grid):
    for build in BUILDERS:
        spec = build()
        for kind in dict.fromkeys(g["kind"] for g in spec["layers"]):
            pricer = KindPricer(kind_values(spec, kind), grid, records)
            # every slot the kind applies (a linear attention run in torch's reads min/max of a
            # block and the length, which the scalar path evaluates: no builder's kind has one)
            for slot in (slot for slot in records.slots if pricer.applies(slot) is not False):
                for expr in (slot.formula, *(e for _, e in slot.elements)):
                    assert not expr.names & pricer.unavailable, (slot.name, expr)
                    assert expr.elementwise(pricer.arrays_total), (slot.name, expr)


def variant(records_text_edits: dict[str, str]):
    text = RECORDS_PATH.read_text()
    for old, new in records_text_edits.items():
        assert old in text, old
        text = text.replace(old, new)
    return parse_records(records_content(yaml.safe_load(text)), "variant.yaml")


NORM_FORMULA = "    formula: micro_factor * recurrent_cycles * s * b * total / (t * cp)\n    ops:\n      normOp"
ATTENTION_FORMULA = "    when: (n_linrec == 0 or hybrid == 1) and n_attMM != 0 and short_conv == 0 and cross == 0\n    formula: micro_factor * recurrent_cycles * s * b * total / (t * cp)\n"
NONLINEAR = {
    # a formula not linear in total, and one comparing total
    NORM_FORMULA: NORM_FORMULA.replace("micro_factor * recurrent_cycles * s * b * total / (t * cp)", "max(micro_factor * recurrent_cycles * s * b * total / (t * cp), 1e6)"),
    ATTENTION_FORMULA: ATTENTION_FORMULA.replace("* total /", "* (total if total > 3 else total ** 2) /"),
    # an element with a conditional on a varying name, a `when` on a varying name
    "      attMM: bc*h*rep + ": "      attMM: (bc*h*rep if cp > 1 else 1.2*bc*h*rep) + ",
    "  norm:\n    part: norm\n    when: runs == 1\n": "  norm:\n    part: norm\n    when: runs == 1 and t * cp != 2\n",
    # full recompute with a conditional on a varying name
    "full: runs * recurrent_cycles * micro_factor * bytes_compute * s * b * h / (cp * sp)": "full: runs * recurrent_cycles * micro_factor * bytes_compute * s * b * h / (cp * (t if sp > 1 else 1))",
    # a derived name that is not elementwise over varying names
    "  f32: 4 ": "  f32: 4 + (1 if t % 2 else 0) ",
}


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_fast_equals_direct_with_non_elementwise_records(grid, build):
    records = variant(NONLINEAR)
    spec = build()
    assert_same(spec, records, grid)
    pricer = KindPricer(kind_values(spec, spec["layers"][0]["kind"]), grid, records)
    assert "f32" in pricer.unavailable
    assert not records.full.elementwise(pricer.arrays)
    norm = next(s for s in records.slots if s.name == "norm")
    assert not norm.formula.elementwise(pricer.arrays_total)  # max of total and a setting-free term
    norm_slot = next(s for s in records.slots if s.name == "norm")
    applies = pricer.applies(norm_slot)
    assert isinstance(applies, np.ndarray) and applies.any() and not applies.all()


def test_errors_agree_where_python_refuses(grid):
    # 1 / (1 / (cp - 1)): numpy would give 1/inf = 0 at cp = 1; Python divides by zero
    records = variant({"      attBMM: n_softmax*(": "      attBMM: 0 * (1 / (1 / (cp - 1))) + n_softmax*("})
    spec = llama_8b()
    for method in ("fast", "direct"):
        with pytest.raises(PricingError) as err:
            price_layers(spec, records, grid, method)
        assert err.value.reason == "bad_value" and "zero" in str(err.value)
    # a negative price is refused by both
    records = variant({"      normOp: gated_norm*": "      normOp: -10**6 + gated_norm*"})
    for method in ("fast", "direct"):
        with pytest.raises(PricingError) as err:
            price_layers(spec, records, grid, method)
        assert "finite and >= 0" in str(err.value)


def test_slot_plans_group_masks_by_the_slots_own_switches(records):
    plans = {p.slot.name: p for p in slot_plans(records)}
    # attention: attUp, attBMM, softmax, headCast, dropout each switchable (attMM is not): 32
    # kept sets, and the joint qkvShared (normOp and attBMM) tells normOp apart where attBMM is
    # recomputed: 16 more; linear: dropout only (attMM, linrec have no switch): 2; norm: normOp: 2
    assert len(plans["attention"].combos) == 48 and len(plans["linear"].combos) == 2 and len(plans["norm"].combos) == 2
    assert len(plans["router"].combos) == 1  # ffMM only: no switch
    for plan in plans.values():
        for mask in range(records.n_masks):
            kept = records.kept(mask)
            expected = tuple(i for i, (name, _) in enumerate(plan.slot.elements) if name in kept)
            assert plan.combos[plan.index[mask]] == expected


def test_fast_equals_direct_for_a_kind_priced_alone(records, grid):
    # the deepseek dense kind next to the moe kind: slots that apply to one kind only
    spec = deepseek_v2_lite()
    prices = assert_same(spec, records, grid)
    assert prices.kinds == ("dense", "moe")
    ffn = {s.name: s for s in records.slots}["ffn"]
    assert not ffn.applies(KindPricer(kind_values(spec, "moe"), grid, records).names)


@pytest.mark.parametrize("seq, tp, cp", list(itertools.product([4096, 32768], [1, 8], [1, 4])))
def test_hybrid_model_corner_settings(records, grid, seq, tp, cp):
    spec = qwen35_9b()
    assert_same(spec, records, grid.with_settings([grid.setting({"seq_length": seq, "tp": tp, "cp": cp})]))
