"""Each op's share of a layer's bytes at the memory curve's settings (catalogue/records/opsplit.py)
and the curve itself (settings.yaml `curve`, catalogue/records/settings.py).

The op rows of every shipped config are checked against the prices the fast path computes by
another route (price_layers at the curve's settings): for every kind, curve setting and switch
set, the shares of the ops the set keeps add up to its price. Every config is censused once per
test process (tests/support/shipped_specs.py), as tests/pricing/test_pricing_shipped.py does.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import yaml
from conftest import load_shipped, repo_id_of, shipped_config_paths

from speccat.catalogue.records.layouts import infeasible
from speccat.catalogue.records.names import PricingError
from speccat.catalogue.records.opsplit import op_prices, shares, switch_kept_rows
from speccat.catalogue.records.oprecords import RECORDS_PATH, parse_records, records_content
from speccat.catalogue.records.priced import kinds_of
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.settings import FIELDS, SETTINGS_PATH, SettingsError, parse_settings, settings_content

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from support.hub_more import REFUSED  # noqa: E402  (the shipped configs the census refuses, with why)

REPOS = [repo_id_of(p) for p in shipped_config_paths() if repo_id_of(p) not in REFUSED]
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def censused():
    """repo_id -> its spec, censused on first use (once per test process, tests/support/shipped_specs.py)."""
    from support.shipped_specs import shipped_spec

    return shipped_spec


def curve_of(grid):
    return grid.with_settings(grid.curve)


# -- the op rows add up to the prices ---------------------------------------------------------


@pytest.mark.parametrize("repo_id", REPOS)
def test_op_rows_add_up_to_the_prices_at_every_curve_setting_and_switch_set(censused, records, grid, repo_id):
    spec = censused(repo_id).to_dict()
    curve = curve_of(grid)
    prices = price_layers(spec, records, curve)
    rows = op_prices(spec, records, grid)
    pairs = shares(records)
    column = {pair: j for j, pair in enumerate(pairs)}
    setting_index = {s["setting_id"]: i for i, s in enumerate(curve.settings)}
    kinds = [kv.kind for kv in kinds_of(spec)]
    assert list(prices.kinds) == kinds and list(prices.setting_ids) == list(setting_index)

    # the settings present: the curve's, less those where some kind cannot be laid out
    skip = {r["setting_id"] for r in infeasible(spec, records, curve)}
    present = [s["setting_id"] for s in curve.settings if s["setting_id"] not in skip]
    assert present, "a shipped config priced at no curve setting"
    assert {r["setting_id"] for r in rows} == set(present)
    assert {r["kind"] for r in rows} == set(kinds)

    # one row per (kind, setting, part, op of shares), no more
    keys = [(r["kind"], r["setting_id"], r["part"], r["op"]) for r in rows]
    assert len(keys) == len(set(keys)) == len(kinds) * len(present) * len(pairs)
    assert set(keys) == {(k, s, p, o) for k in kinds for s in present for p, o in pairs}

    kept = np.full((len(kinds), len(curve.settings), len(pairs)), np.nan)
    for r in rows:
        k, i = kinds.index(r["kind"]), setting_index[r["setting_id"]]
        kept[k, i, column[(r["part"], r["op"])]] = r["kept_bytes"]
        assert r["full_bytes"] == prices.full[k, i], (r["kind"], r["setting_id"])
        assert math.isfinite(r["kept_bytes"]) and r["kept_bytes"] >= 0

    # which (part, op) columns each switch set keeps, by the op's name (Records.kept)
    keeps = np.array([[op in records.kept(m) for _, op in pairs] for m in range(records.n_masks)])
    assert keeps.shape == (records.n_masks, len(pairs))
    for k, kind in enumerate(kinds):
        for i in (setting_index[s] for s in present):
            shares_here = kept[k, i]
            assert not np.isnan(shares_here).any()
            for m in range(records.n_masks):
                summed = math.fsum(shares_here[keeps[m]])
                want = prices.total[k, i, m]
                assert summed == pytest.approx(want, rel=1e-12, abs=0), (kind, curve.settings[i]["setting_id"], m, summed, want)


# -- one share by hand --------------------------------------------------------------------------


def test_llama_8b_ffn_ffmm_share_by_hand(censused, records, grid):
    config = load_shipped(LLAMA)
    spec = censused(LLAMA).to_dict()
    h, hff = config["hidden_size"], config["intermediate_size"]  # config.json: 4096, 14336
    assert (h, hff) == (4096, 14336) and config["torch_dtype"] == "bfloat16"
    # the census's facts the element reads (spec ops and variants of the one kind, `decoder`)
    assert spec["ops"]["decoder"]["ffMM"] == 3  # n_ffMM == 3: gated = 1 (records.yaml names: gate, up, down)
    variants = spec["variants"]["decoder"]
    for name in ("ff_input_shared", "ff_out_gate", "ff_fused_gate_up", "act_output_read"):
        assert variants[name] is False, name
    assert variants["ff_token_mixes"] == 0  # ff_shift_rows = ff_token_mixes + (1 if ff_token_mixes > 0 else 0) = 0
    assert grid.dtype_bytes["bf16"] == 2
    # records.yaml, slot `ffn` (part ffn; when n_exp == 1 and n_ffMM != 0 and runs == 1: a dense MLP):
    #   formula  micro_factor * s * b * total / (t * cp)
    #   ffMM     bc*h*rep*(1 - ff_input_shared + ff_shift_rows + 2*ff_out_gate) + bc*h*ff_token_mixes*t*cp/(s*b)
    #            + bc*hff*(mg + (1 - mg)*(2*gated + 1 - ff_fused_gate_up - act_output_read))
    # with
    #   bc = bytes_compute = 2            settings.yaml dtypes: bf16 is 2 bytes
    #   h = 4096, hff = 14336             config.json hidden_size, intermediate_size
    #   rep = t / sp = 1                  records.yaml names; sp = t with sequence_parallel (names.py), t = 1
    #   ff_input_shared = ff_out_gate = ff_token_mixes = ff_shift_rows = 0       census variants (above)
    #   mg = megatron = 0                 the transformers stack
    #   gated = 1                         n_ffMM == 3 (census ops)
    #   ff_fused_gate_up = act_output_read = 0                                   census variants (above)
    #   micro_factor = in_flight = 1, b = micro_batch = 1, t = tp = 1, cp = 1    settings.yaml defaults / the curve
    # ffMM = 2*4096*1*(1 - 0 + 0 + 0) + 0 + 2*14336*(0 + 1*(2 + 1 - 0 - 0)) = 8,192 + 86,016 = 94,208 bytes per token
    # (the census measured 94,208 bytes per token of ffMM at 4,096 tokens), and the share is s * 94,208.
    bc, rep, gated = 2, 1, 1
    per_token = bc * h * rep * 1 + bc * hff * (2 * gated + 1)
    assert per_token == 94_208 == spec["measured"]["decoder"]["bytes_per_token"]["ffMM"]
    rows = op_prices(spec, records, grid)
    for seq, want in ((1024, 96_468_992), (1_048_576, 98_784_247_808)):
        assert want == seq * per_token  # micro_factor * s * b * total / (t * cp), all of them 1 but s
        setting = grid.setting({"stack": "transformers", "seq_length": seq, "tp": 1, "dtype": "bf16"})
        assert setting["setting_id"] in {s["setting_id"] for s in grid.curve}
        (got,) = [r["kept_bytes"] for r in rows if r["setting_id"] == setting["setting_id"] and (r["part"], r["op"]) == ("ffn", "ffMM")]
        assert got == want


# -- nonlinear_slot -----------------------------------------------------------------------------


def records_with(slot: str, formula: str):
    """The shipped records with one slot's formula changed, parsed by the records loader."""
    data = yaml.safe_load(RECORDS_PATH.read_text())
    assert slot in data["slots"]
    data["slots"][slot]["formula"] = formula
    return parse_records(records_content(data), "nonlinear.yaml")


@pytest.mark.parametrize(
    "slot, formula",
    [
        # keeping nothing prices 1 byte, not 0: not the sum of no shares
        ("norm", "max(micro_factor * s * b * total / (t * cp), 1)"),
        ("norm", "max(total, 1)"),
        # quadratic in total in a slot of two ops (ffMM, ffAct): keeping both is more than the two shares
        ("ffn", "micro_factor * s * b * total * total / (t * cp)"),
    ],
)
def test_a_slot_not_linear_in_total_is_refused(censused, records, grid, slot, formula):
    spec = censused(LLAMA).to_dict()
    assert op_prices(spec, records, grid)  # the shipped records price it
    changed = records_with(slot, formula)
    with pytest.raises(PricingError) as err:
        op_prices(spec, changed, grid)
    assert err.value.reason == "nonlinear_slot"
    assert f"slot {slot}" in str(err.value)


# -- switch_kept --------------------------------------------------------------------------------


def test_switch_kept_rows_are_the_ops_each_set_keeps(records):
    rows = switch_kept_rows(records)
    assert len(rows) == len({(r["mask"], r["op"]) for r in rows})
    ops = {op for _, op in shares(records)}
    by_mask: dict[int, set[str]] = {m: set() for m in range(records.n_masks)}
    for r in rows:
        by_mask[r["mask"]].add(r["op"])
    assert set(by_mask) == set(range(records.n_masks))
    for mask, kept in by_mask.items():
        assert kept == records.kept(mask) & ops, mask
    assert by_mask[0] == ops
    assert by_mask[records.n_masks - 1] < ops  # recomputing every switch drops some op


# -- the curve's settings -----------------------------------------------------------------------


def shipped_content() -> dict:
    return settings_content(yaml.safe_load(SETTINGS_PATH.read_text()))


@pytest.mark.parametrize(
    "curve, reason",
    [
        ({"seq_length": [1024], "bogus": [1]}, "unknown_field"),
        ({"seq_length": []}, "bad_value"),
        ({"seq_length": [0, 1024]}, "bad_value"),
        ({"tp": 1}, "bad_value"),
        ({"stack": ["transformers", "deepspeed"]}, "bad_value"),
    ],
)
def test_a_bad_curve_is_refused(curve, reason):
    data = {**shipped_content(), "curve": curve}
    with pytest.raises(SettingsError) as err:
        parse_settings(data, "curve.yaml")
    assert err.value.reason == reason


def test_no_curve_block_is_no_curve():
    data = shipped_content()
    del data["curve"]
    grid = parse_settings(data, "nocurve.yaml")
    assert grid.curve == () and grid.stored == grid.settings + grid.overload
    assert len(grid.settings) == 96


def test_the_shipped_curve(grid):
    listed = yaml.safe_load(SETTINGS_PATH.read_text())["curve"]
    assert math.prod(len(v) for v in listed.values()) == len(grid.curve)
    # every combination of the listed values, every other field at its default
    seen = {tuple(s[f] for f in listed) for s in grid.curve}
    assert len(seen) == len(grid.curve)
    defaults = grid.setting({})
    for s in grid.curve:
        assert set(s) == {"setting_id", *FIELDS}
        assert all(s[f] == defaults[f] for f in FIELDS if f not in listed)
        assert s["setting_id"] == grid.setting({f: s[f] for f in listed})["setting_id"]
    # a curve setting that is also the grid's is the same setting, under one id
    by_fields = {tuple(s[f] for f in FIELDS): s["setting_id"] for s in grid.settings}
    shared = [s for s in grid.curve if tuple(s[f] for f in FIELDS) in by_fields]
    for s in shared:
        assert by_fields[tuple(s[f] for f in FIELDS)] == s["setting_id"]
    grid_values = {f: {s[f] for s in grid.settings} for f in listed}
    assert len(shared) == math.prod(len(set(v) & grid_values[f]) for f, v in listed.items()) > 0
    # stored: the grid's settings, the overload's (routing skew), then the curve's they lack, every id once
    stored = [s["setting_id"] for s in grid.stored]
    assert len(stored) == len(set(stored)) == len(grid.settings) + len(grid.overload) + len(grid.curve) - len(shared)
    assert set(stored) == {s["setting_id"] for s in grid.settings + grid.overload + grid.curve}
    assert tuple(grid.stored[: len(grid.settings) + len(grid.overload)]) == grid.settings + grid.overload
    seqs = sorted(listed["seq_length"])
    assert seqs[0] < min(grid_values["seq_length"]) and seqs[-1] > max(grid_values["seq_length"])
