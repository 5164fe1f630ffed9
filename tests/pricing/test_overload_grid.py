"""Routing skew in the stored grid (catalogue/records/settings.yaml `overload`, docs/pricing.md):
a spec with routed experts is priced at every grid setting again at each stored
dropless_tok_factor, a dense spec at the grid alone; the night stores those prices and their
setting rows, fits_on still answers at even loads, and `speccat fit --moe-overload F` at a stored
F gives what the night stored.

The number worked by hand is tests/flows/test_fit_moe_overload.py's: one routed token slot of
Qwen3-30B-A3B on the megatron stack keeps the down projection's input (expert width, bf16), the
fused activation's input and the gate-up output (2 x expert width, bf16), the gathered input
(hidden, bf16), the routing weight (bf16) and three int64 sort/gather indices; a token has as many
slots as chosen experts. At factor F a layer keeps (F - 1) times that much more per token, in its
feed-forward part, and nothing else changes."""

from __future__ import annotations

import contextlib
import json

import pytest
import yaml
from support import store_runs
from support.shipped_specs import shipped_spec

from speccat.catalogue.records.settings import FIELDS, SETTINGS_PATH, SettingsError, parse_settings, routed_experts, settings_content
from speccat.catalogue.store.file import open_readonly, publish, stored

MOE = "Qwen/Qwen3-30B-A3B"
DENSE = "meta-llama/Llama-3.1-8B-Instruct"
BF16, I64 = 2, 8


def shipped_content() -> dict:
    return settings_content(yaml.safe_load(SETTINGS_PATH.read_text()))


@pytest.fixture(scope="module")
def priced():
    """The night's pricing (flows/analysis.py census_priced) of one MoE and one dense shipped spec."""
    from speccat.flows.analysis import census_priced

    return {repo: census_priced({}, repo, spec_json=shipped_spec(repo).to_json()).priced for repo in (MOE, DENSE)}


def test_the_overload_settings_are_the_grid_at_each_stored_factor(grid):
    listed = yaml.safe_load(SETTINGS_PATH.read_text())["overload"]
    assert listed == {"dropless_tok_factor": [1.25, 1.5, 2]}  # the factors issue #28 names, beside the grid's 1
    assert grid.schema["dropless_tok_factor"].values == (1.0,)  # the grid itself prices even loads only
    assert len(grid.overload) == 3 * len(grid.settings) == 288
    for i, factor in enumerate(listed["dropless_tok_factor"]):
        for even, skewed in zip(grid.settings, grid.overload[i * 96 : (i + 1) * 96], strict=True):
            assert skewed["dropless_tok_factor"] == factor
            assert {f: skewed[f] for f in FIELDS if f != "dropless_tok_factor"} == {f: even[f] for f in FIELDS if f != "dropless_tok_factor"}
            # the same setting `grid.setting` builds (what `fit --moe-overload` prices): one id
            assert skewed["setting_id"] == grid.setting({**{f: even[f] for f in FIELDS}, "dropless_tok_factor": factor})["setting_id"]
    ids = [s["setting_id"] for s in grid.stored]
    assert len(ids) == len(set(ids)) and {s["setting_id"] for s in grid.overload} <= set(ids)


def test_no_overload_section_is_no_overload_settings(grid):
    data = shipped_content()
    del data["overload"]
    bare = parse_settings(data, "bare.yaml")
    assert bare.overload == () and bare.settings == grid.settings and bare.version != grid.version
    assert bare.priced_at(shipped_spec(MOE)) is bare


@pytest.mark.parametrize(
    "overload, reason, said",
    [
        ({"dropless_tok_factor": []}, "bad_value", "overload.dropless_tok_factor: must be a non-empty list"),
        ({"dropless_tok_factor": 2}, "bad_value", "overload.dropless_tok_factor: must be a non-empty list"),
        ({"dropless_tok_factor": [1.5, 1.5]}, "bad_value", "overload.dropless_tok_factor: lists a value twice"),
        ({"dropless_tok_factor": [1.5, 1]}, "bad_value", "overload.dropless_tok_factor: [1.0] the grid prices already"),
        ({"dropless_tok_factor": [0]}, "bad_value", "overload.dropless_tok_factor[0]: must be a finite number > 0"),
        ({"dropless_tok_factor": ["2"]}, "bad_value", "overload.dropless_tok_factor[0]: must be a number"),
        ({"dropless": [2]}, "unknown_field", "overload.dropless: unknown field"),
    ],
)
def test_a_bad_overload_section_is_refused(overload, reason, said):
    with pytest.raises(SettingsError) as err:
        parse_settings({**shipped_content(), "overload": overload}, "overload.yaml")
    assert err.value.reason == reason and said in str(err.value)


def test_a_spec_with_routed_experts_is_priced_at_the_overload_settings_too(grid, priced):
    assert routed_experts(shipped_spec(MOE)) and not routed_experts(shipped_spec(DENSE))
    grid_ids = {s["setting_id"] for s in grid.settings}
    overload_ids = {s["setting_id"] for s in grid.overload}
    moe, dense = priced[MOE], priced[DENSE]
    assert set(moe["prices"].full_prices["setting_id"].to_pylist()) == grid_ids | overload_ids
    assert len(grid_ids) == 96 and len(overload_ids) == 3 * 96
    assert set(dense["prices"].full_prices["setting_id"].to_pylist()) == grid_ids
    for name in ("end_prices", "loss_prices", "op_costs"):  # every table priced per setting, at the same settings
        assert {r["setting_id"] for r in moe[name]} == grid_ids | overload_ids, name
        assert {r["setting_id"] for r in dense[name]} == grid_ids, name
    # the memory curve stays at even loads: no overload setting is among its settings
    assert {r["setting_id"] for r in moe["op_prices"]} == {s["setting_id"] for s in grid.curve}


def test_the_routed_slot_keeps_f_times_the_even_load_and_nothing_else_moves(grid, priced):
    spec = shipped_spec(MOE)
    expert, hidden, chosen = spec["moe_intermediate_size"], spec["hidden_size"], spec["num_experts_per_tok"]
    slot = expert * BF16 + 2 * expert * BF16 + hidden * BF16 + BF16 + 3 * I64  # one routed token slot, megatron
    assert (expert, hidden, chosen, slot) == (768, 2048, 8, 8730)
    moe = priced[MOE]
    layer = {(r["kind"], r["setting_id"], r["mask"]): r for r in moe["prices"].layer_prices.to_pylist()}
    full = {(r["kind"], r["setting_id"]): r["kept"] for r in moe["prices"].full_prices.to_pylist()}
    ends = {r["setting_id"]: {k: v for k, v in r.items() if k != "setting_id"} for r in moe["end_prices"]}
    kinds = {kind for kind, _, _ in layer}
    assert kinds == {"decoder"}
    for tp in (1, 2):
        even = grid.setting({"stack": "megatron", "tp": tp})
        s = even["seq_length"]
        for factor in (1.25, 1.5, 2):
            skewed = grid.setting({"stack": "megatron", "tp": tp, "dropless_tok_factor": factor})
            before, after = layer["decoder", even["setting_id"], 0], layer["decoder", skewed["setting_id"], 0]
            # the routed slot's tokens are split over tp (t * cp) like the layer's other tokens
            assert after["ffn"] - before["ffn"] == pytest.approx((factor - 1) * s * chosen * slot / tp, rel=1e-12), (tp, factor)
            assert (after["attention"], after["norm"]) == (before["attention"], before["norm"])
            assert full["decoder", skewed["setting_id"]] == full["decoder", even["setting_id"]]  # full recompute keeps the input alone
            assert ends[skewed["setting_id"]] == ends[even["setting_id"]]  # the embedding and the logits see every token once


def night(items, run_id, day=1):
    return store_runs.make_run(run_id, items, day=day, fits_on=True)


def config_hash_of(repo: str) -> str:
    from conftest import load_shipped

    from speccat.census import config_hash

    return config_hash(load_shipped(repo))


def item(repo, priced_rows) -> store_runs.Censused:
    """A shipped config and its spec with the rows census_priced gave it, as the store's runs hold one."""
    from conftest import load_shipped

    rows = [tuple(priced_rows[name]) for name in ("point_prices", "end_prices", "loss_prices", "op_costs", "op_prices")]
    return store_runs.Censused(repo, load_shipped(repo), config_hash_of(repo), shipped_spec(repo).to_dict(), priced_rows["prices"], *rows)


def even_only(grid, rows: dict) -> dict:
    """What the night priced before the overload settings: the same rows at the grid's settings."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from speccat.catalogue.records.pricing import PriceTables

    ids = pa.array([s["setting_id"] for s in grid.settings], pa.string())
    tables = rows["prices"]
    cut = PriceTables(*(getattr(tables, t).filter(pc.is_in(getattr(tables, t)["setting_id"], value_set=ids))
                        for t in ("layer_prices", "full_prices", "switch_costs")))  # fmt: skip
    keep = set(ids.to_pylist())
    per_setting = ("end_prices", "loss_prices", "op_costs")
    return {**rows, "prices": cut, **{k: [r for r in rows[k] if r["setting_id"] in keep] for k in per_setting}}


@pytest.fixture(scope="module")
def catalogues(grid, priced, tmp_path_factory):
    """Two catalogues of the same night: priced as now (the MoE spec at the overload settings
    too) and as before (every spec at the grid alone)."""
    folder = tmp_path_factory.mktemp("overload")
    now, before = folder / "now.duckdb", folder / "before.duckdb"
    publish(now, night([item(MOE, priced[MOE]), item(DENSE, priced[DENSE])], "night-1"))
    publish(before, night([item(MOE, even_only(grid, priced[MOE])), item(DENSE, priced[DENSE])], "night-1"))
    return now, before


def test_the_night_stores_the_overload_settings_and_fits_on_stays_at_even_loads(grid, catalogues):
    now, before = catalogues
    with contextlib.closing(open_readonly(now)) as con:
        settings = {r[0]: r[1] for r in con.execute("SELECT setting_id, dropless_tok_factor FROM settings").fetchall()}
        assert len(settings) == len(grid.stored)
        assert {settings[s["setting_id"]] for s in grid.overload} == {1.25, 1.5, 2.0}
        counts = dict(con.execute("SELECT config_hash, count(DISTINCT setting_id) FROM full_prices GROUP BY ALL").fetchall())
        assert counts == {config_hash_of(MOE): 96 + 3 * 96, config_hash_of(DENSE): 96}
        # a per-setting question asks at even loads unless told otherwise: one setting, not four
        assert con.execute("SELECT dropless_tok_factor FROM chosen_settings").fetchall() == [(1.0,)]
        con.execute("SET VARIABLE dropless_tok_factor = 1.5")
        assert con.execute("SELECT dropless_tok_factor FROM chosen_settings").fetchall() == [(1.5,)]
        fits_now = con.execute("SELECT * FROM fits_on ORDER BY ALL").fetchall()
        layouts = con.execute("SELECT DISTINCT s.dropless_tok_factor FROM fits_on_layouts JOIN settings AS s USING (setting_id)").fetchall()
    assert layouts == [(1.0,)]
    with contextlib.closing(open_readonly(before)) as con:
        fits_before = con.execute("SELECT * FROM fits_on ORDER BY ALL").fetchall()
    assert fits_now == fits_before and fits_now


def test_the_plan_stage_prices_a_moe_spec_again_until_it_holds_the_overload_settings(grid, catalogues):
    now, before = catalogues
    grid_ids = [s["setting_id"] for s in grid.settings]
    overload_ids = [s["setting_id"] for s in grid.overload]
    census, records = store_runs.census_version(), store_runs.records().version
    hashes = {repo: config_hash_of(repo) for repo in (MOE, DENSE)}
    assert stored(now, census, records, grid_ids, overload_ids=overload_ids).priced == set(hashes.values())
    # before the overload settings the MoE spec is not priced at tonight's grid; the dense one is
    assert stored(before, census, records, grid_ids, overload_ids=overload_ids).priced == {hashes[DENSE]}
    assert stored(before, census, records, grid_ids).priced == set(hashes.values())


def test_fit_at_a_stored_factor_gives_what_the_night_stored(grid, catalogues, capsys):
    """`speccat fit REPO --moe-overload 1.5` on the catalogue's repo prices on the fly; at one
    layout (every layer on one rank, one micro-batch in flight) its activations are the layers
    times the night's stored price of a layer at the overload setting of that tp and cp."""
    from speccat.flows.cli import main

    now, _ = catalogues
    setting = grid.setting({"stack": "megatron", "tp": 1, "cp": 1, "dropless_tok_factor": 1.5})
    assert setting["setting_id"] in {s["setting_id"] for s in grid.overload}
    with contextlib.closing(open_readonly(now)) as con:
        (total, layers), = con.execute(
            "SELECT p.total, k.layers FROM layer_prices AS p JOIN kinds AS k USING (config_hash, census_version, transformers_version, torch_version, kind) "
            "JOIN repos AS r USING (config_hash) WHERE r.repo_id = ? AND p.setting_id = ? AND p.mask = 0", [MOE, setting["setting_id"]]
        ).fetchall()  # fmt: skip
    argv = ["fit", MOE, "--db", str(now), "--stack", "megatron", "--seq", str(setting["seq_length"]), "--gpus", "8", "--tp", "1",
            "--cp", "1", "--pp", "1", "--ep", "8", "--zero", "1", "--gpu-mem", "1000GiB", "--json", "--top", "0", "--moe-overload", "1.5"]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["spec_source"].startswith("the catalogue's spec") and out["setting"]["dropless_tok_factor"] == 1.5
    none = next(r for r in out["rows"] if r["switch_set"] == "none")
    assert none["activations"] == layers * total
