"""The op records file and its loader (catalogue/records/oprecords.py, docs/pricing.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from speccat.catalogue.records.expr import Expr
from speccat.catalogue.vocabulary import OPS
from speccat.catalogue.records.oprecords import RECORDS_PATH, RecordsError, Slot, load_records
from speccat.catalogue.shared import SHARED_PATH
from speccat.census.structure.family import PROFILES_DIR

SWITCHES = ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct", "attUp")


def test_the_records_load_with_the_switches_ops_and_parts(records):
    assert records.switches == SWITCHES
    assert tuple(records.ops) == OPS
    assert records.n_masks == 256
    assert records.parts["attUp"].part_of == "attMM" and records.parts["attUp"].switch == "attUp"
    # the ops only full recompute drops
    assert [op for op, rec in records.ops.items() if rec.switch is None] == ["attMM", "ffMM", "linrec"]
    assert {s.name: s.part for s in records.slots} == {
        "attention": "attention", "linear": "attention", "mamba": "attention", "mamba2": "attention", "short_conv": "attention", "rwkv": "attention", "rglru": "attention",
        "ffn": "ffn", "routed": "ffn", "shared": "ffn", "dense_beside": "ffn", "latent": "ffn", "router": "ffn", "norm": "norm", "scan_norms": "norm",
        "cross": "attention", "cross_kv": "attention", "cross_gate": "ffn", "cross_norm": "norm", "cross_kv_norm": "norm",
        "linear_eager": "attention", "linear_eager_norm": "norm", "linear_eager_gated": "attention", "linear_eager_gated_norm": "norm",
        "layer_gate": "ffn", "ff_down_norm": "norm", "norm_gate": "norm",
        "stream_code_attn": "attention", "stream_code_ff": "ffn", "router_mlp": "ffn", "router_mlp_norm": "norm", "half_qk_norm": "norm",
        "routed_attention": "attention", "side": "attention", "stream_scale_attn": "attention", "stream_scale_ff": "ffn",
        "channel_scale_attn": "attention", "channel_scale_ff": "ffn",
        "experts_out_norm": "norm",
        "hyper": "attention", "hyper_ff": "ffn",
        "depth_attention": "attention", "depth_attention_norm": "norm", "later_children": "ffn", "later_norms": "norm",
    }  # fmt: skip
    assert re.fullmatch(r"[0-9a-f]{16}", records.version)


def test_masks_follow_the_switch_order(records):
    assert records.mask_of([]) == 0
    assert records.mask_of(["attBMM"]) == 1
    assert records.mask_of(["attUp"]) == 128
    assert records.mask_of(["softmax", "headCast"]) == 0b1010
    assert records.mask_of(SWITCHES) == 255
    assert records.switches_of(0b1010) == ("headCast", "softmax")
    with pytest.raises(RecordsError) as err:
        records.mask_of(["attBMM", "sofmax"])
    assert err.value.reason == "unknown_switch" and "sofmax" in str(err.value)


def test_kept_ops_and_parts_per_mask(records):
    everything = set(OPS) | {"attUp", "qkvShared"}
    assert records.kept(0) == everything
    # ops without a switch (attMM, ffMM, linrec) are kept by every switch set
    assert records.kept(255) == {"attMM", "ffMM", "linrec"}
    # a joint (normOp and attBMM keep qkvShared) is kept while either op is, dropped with both
    assert records.kept(records.mask_of(["normOp"])) == everything - {"normOp"}
    assert records.kept(records.mask_of(["normOp", "attBMM"])) == everything - {"normOp", "attBMM", "qkvShared"}
    assert records.kept(records.mask_of(["attUp"])) == everything - {"attUp"}
    assert records.kept(records.mask_of(["softmax"])) == everything - {"softmax"}


def acceptance_slot() -> Slot:
    return Slot(
        name="example",
        part="attention",
        formula=Expr("total * max(t, 1) / min(t, 2)"),
        elements=(("attMM", Expr("h if flag else missing")), ("attBMM", Expr("3"))),
        when=None,
    )


class NoMissing(dict):
    """Names that fail any lookup of `missing` (max and min are looked up here first)."""

    def __missing__(self, key):
        assert key != "missing", "the name `missing` was looked up"
        raise KeyError(key)


def test_slot_evaluation_with_keep_flags():
    slot = acceptance_slot()
    names = NoMissing(h=10, flag=1, t=4)
    # t = 4: max(4, 1) / min(4, 2) = 2, so the slot is twice its kept elements
    assert slot.value(names, {"attMM", "attBMM"}) == (10 + 3) * 2 == 26
    assert slot.value(names, {"attMM"}) == 10 * 2 == 20
    assert slot.value(names, {"attBMM"}) == 3 * 2 == 6
    assert slot.value(names, set()) == 0


def test_dropped_elements_are_not_evaluated():
    slot = acceptance_slot()
    names = NoMissing(flag=0, t=4)  # attMM would read `missing`; it is dropped
    assert slot.value(names, {"attBMM"}) == 6


def test_the_version_ignores_layout_but_not_content(tmp_path):
    text = RECORDS_PATH.read_text()
    base = load_records().version
    relaid = tmp_path / "records.yaml"
    relaid.write_text("# another comment\n" + text.replace("total / (t * cp)", "total/(t*cp)"))
    assert load_records(relaid).version == base
    changed = tmp_path / "changed.yaml"
    changed.write_text(text.replace("dc_q: 0", "dc_q: 1"))
    assert load_records(changed).version != base


# ---------------------------------------------------------------- refusals of a bad copy


def refused(tmp_path: Path, old: str, new: str, count: int = 1) -> RecordsError:
    """The refusal of a copy of records.yaml, or of shared.yaml where `old` is in its switch sections."""
    path = SHARED_PATH if old in SHARED_PATH.read_text() else RECORDS_PATH
    text = path.read_text()
    assert text.count(old) >= count, old
    bad = tmp_path / path.name
    bad.write_text(text.replace(old, new, count))
    with pytest.raises(RecordsError) as err:
        load_records(bad) if path == RECORDS_PATH else load_records(shared=bad)
    assert str(err.value).startswith(f"{path.name}: ")
    return err.value


# The norm slot's formula line with what follows it, which makes it unique in the file.
NORM_FORMULA = "    formula: micro_factor * recurrent_cycles * s * b * total / (t * cp)\n    ops:\n      normOp"


@pytest.mark.parametrize(
    "old, new, reason, key",
    [
        ("  attMM:    {switch: null", "  attMX:    {switch: null", "unknown_op", "ops.attMX"),
        ("  linrec:   {switch: null}\n", "", "missing_op", "ops.linrec"),
        ("switches: [attBMM, headCast", "switches: [atBMM, headCast", "unknown_switch", "ops.attBMM.switch"),
        ("softmax:  {switch: softmax", "softmax:  {switch: sofmax", "unknown_switch", "ops.softmax.switch"),
        ("{switch: gather}", "{switch: gather, cost: 1}", "unknown_key", "ops.gather.cost"),
        ("attUp: {part_of: attMM", "attUp: {part_of: attMX", "unknown_op", "parts.attUp.part_of"),
        (NORM_FORMULA, NORM_FORMULA.replace("formula:", "formulae:"), "unknown_key", "slots.norm.formulae"),
        ("    part: norm\n", "    part: memory\n", "bad_part", "slots.norm.part"),
        (NORM_FORMULA, NORM_FORMULA.replace(" * total", ""), "formula_without_total", "slots.norm.formula"),
        ("      normOp: gated_norm*", "      normOpp: gated_norm*", "unknown_op", "slots.norm.ops.normOpp"),
        ("      normOp: gated_norm*", "      normOp: gated_normal*", "unknown_name", "slots.norm.ops.normOp"),
        ("      normOp: gated_norm*", "      normOp: total*", "unknown_name", "slots.norm.ops.normOp"),
        ("      normOp: gated_norm*", "      normOp: gated_norm.real*", "bad_expression", "slots.norm.ops.normOp"),
        ("  dc_q: 0", "  dc_qq: 0", "unknown_name", "defaults.dc_qq"),
        ("  bc: bytes_compute", "  h: bytes_compute", "bad_value", "names.h"),
        ("tolerance: 0.02", "lable: v1\ntolerance: 0.02", "unknown_key", "lable"),
        ("full: runs * recurrent_cycles", "fulll: runs * recurrent_cycles", "unknown_key", "fulll"),
    ],
)
def test_a_bad_copy_is_refused_naming_the_file_and_key(tmp_path, old, new, reason, key):
    err = refused(tmp_path, old, new)
    assert err.reason == reason
    assert f": {key}:" in str(err)


def test_a_switch_that_drops_nothing_is_refused(tmp_path):
    err = refused(tmp_path, "gather:   {switch: gather}", "gather:   {switch: null}")
    assert err.reason == "unknown_switch" and "shared.yaml: switches[5]:" in str(err)


def test_two_records_claiming_one_switch_are_refused(tmp_path):
    err = refused(tmp_path, "headCast: {switch: headCast}", "headCast: {switch: softmax}")
    assert "shared.yaml: ops.headCast.switch:" in str(err) and "already drops" in str(err)


def test_the_switches_are_stated_in_shared_yaml_only(tmp_path):
    err = refused(tmp_path, "tolerance: 0.02", "switches: [attBMM]\ntolerance: 0.02")
    assert err.reason == "unknown_key" and "records.yaml: switches:" in str(err)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(RecordsError) as err:
        load_records(tmp_path / "absent.yaml")
    assert err.value.reason == "not_found"
    bad = tmp_path / "records.yaml"
    bad.write_text("switches: [a, b\n")
    with pytest.raises(RecordsError) as err:
        load_records(bad)
    assert err.value.reason == "not_yaml"


def test_the_file_states_every_op_and_slot_docs_pricing_lists():
    data = yaml.safe_load(RECORDS_PATH.read_text())
    assert list(yaml.safe_load(SHARED_PATH.read_text())["switches"]) == list(SWITCHES)
    assert set(data["slots"]["ffn"]["ops"]) == {"ffMM", "ffAct"}
    # the attention kernel's saves, each with its own switch, and the ops only full recompute drops
    # and the fused q/k/v output the QK-norms and the kernel keep together (a joint of normOp and attBMM)
    assert set(data["slots"]["attention"]["ops"]) == {"attMM", "attUp", "attBMM", "qkvShared", "softmax", "headCast", "dropout"}
    assert data["joint"] == {"qkvShared": ["normOp", "attBMM"]}
    assert set(data["slots"]["linear"]["ops"]) == {"attMM", "linrec", "dropout"}
    assert data["defaults"] == {"sdpa_refused": 0, "dhr": 0, "dc_kv": 0, "dc_q": 0, "lin_block": 0}
    # formulas read dimensions, dtypes and stated facts: no family name appears in the file
    profiles = PROFILES_DIR.glob("*.yaml")
    families = {str(name) for p in profiles for d in [yaml.safe_load(p.read_text())] for name in [d["family"], *d.get("match", [])]}
    assert {"llama", "gemma", "deepseek"} <= families
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", yaml.safe_dump({k: data[k] for k in ("names", "slots", "full")})))
    assert not words & families
