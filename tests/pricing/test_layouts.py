"""Parallel layouts a model cannot have (catalogue/records/layouts.yaml): never priced, always
said why, and refused by `speccat price`."""

from __future__ import annotations

import dataclasses
import json

import pytest
from support import store_runs as runs
from conftest import SNAPSHOT

from speccat.catalogue.records import layouts
from speccat.catalogue.store.file import open_readonly, publish, stored
from speccat.flows.cli import main

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # 9 attention heads, 3 kv heads


def test_the_rules_refuse_what_tp_or_the_sequence_sharding_cannot_split(records, grid):
    smol = runs.censused(SMOL).spec
    assert (smol["num_attention_heads"], smol["num_key_value_heads"]) == (9, 3)
    rows = layouts.infeasible(smol, records, grid)
    tp_of = {s["setting_id"]: s["tp"] for s in grid.settings}
    # 9 heads split only at tp 1: every setting with tp 2, 4 or 8 is refused, by the heads rule.
    assert sorted({tp_of[r["setting_id"]] for r in rows}) == [2, 4, 8]
    assert len(rows) == sum(1 for s in grid.settings if s["tp"] > 1) and {r["rule"] for r in rows} == {"heads_tp"}
    assert "9 attention heads are not divisible by tp 2" in {r["message"] for r in rows}

    def verdict(a, n_kv, t, s=4096, cp=1, sp=1):
        names = {"a": a, "n_kv": n_kv, "t": t, "s": s, "cp": cp, "sp": sp}
        return [rule.name for rule in layouts.load_rules() if not rule.feasible(names)]

    assert verdict(32, 8, 4) == [] and verdict(32, 2, 8) == []  # 2 kv heads replicated over 8 ranks
    assert verdict(32, 8, 16) == []  # 8 kv heads split... 16 % 8 == 0: replicated twice
    assert verdict(36, 12, 8) == ["heads_tp", "kv_heads_tp"]  # 12 kv heads neither divide by 8 nor divide it
    assert verdict(40, 10, 4) == ["kv_heads_tp"]
    assert verdict(32, 8, 2, s=4097, cp=1, sp=2) == ["sequence_sharding"]
    assert verdict(32, 8, 1, s=4098, cp=4, sp=1) == ["sequence_sharding"]


def test_the_catalogue_holds_no_price_of_an_infeasible_setting_but_says_why(tmp_path, records, grid):
    smol = runs.censused(SMOL)
    rows = layouts.infeasible(smol.spec, records, grid)
    bad = {r["setting_id"] for r in rows}
    night = runs.make_run("n1", [smol], day=1)
    night = dataclasses.replace(
        night, prices={smol.config_hash: layouts.split(smol.prices, rows)}, infeasible={smol.config_hash: rows},
        end_prices={smol.config_hash: [r for r in smol.end_prices if r["setting_id"] not in bad]},
        loss_prices={smol.config_hash: [r for r in smol.loss_prices if r["setting_id"] not in bad]},
        op_costs={smol.config_hash: [r for r in smol.op_costs if r["setting_id"] not in bad]},
    )
    path = tmp_path / "catalogue.duckdb"
    publish(path, night)
    con = open_readonly(path)
    try:
        priced = {s for (s,) in con.execute("SELECT DISTINCT setting_id FROM full_prices").fetchall()}
        layer = {s for (s,) in con.execute("SELECT DISTINCT setting_id FROM layer_prices").fetchall()}
        ends = {s for (s,) in con.execute("SELECT DISTINCT setting_id FROM end_prices").fetchall()}
        said = con.execute("SELECT DISTINCT tp, rule FROM repo_infeasible WHERE repo_id = ? ORDER BY tp", [SMOL]).fetchall()
        at_tp2 = con.execute("SELECT count(*) FROM repo_prices WHERE repo_id = ? AND tp = 2", [SMOL]).fetchone()[0]
    finally:
        con.close()
    assert priced == layer == ends == {s["setting_id"] for s in grid.settings} - bad and priced
    assert said == [(2, "heads_tp"), (4, "heads_tp"), (8, "heads_tp")] and at_tp2 == 0
    # A setting with a reason counts as done: the next night does not price the config again.
    held = stored(path, night.census_version, night.records_version, [s["setting_id"] for s in grid.settings])
    assert smol.config_hash in held.priced


def test_a_night_that_prices_an_infeasible_setting_is_refused(records, grid, tmp_path):
    smol = runs.censused(SMOL)
    rows = layouts.infeasible(smol.spec, records, grid)
    night = dataclasses.replace(runs.make_run("n1", [smol], day=1), infeasible={smol.config_hash: rows})  # prices kept
    with pytest.raises(ValueError, match="both priced and infeasible"):
        publish(tmp_path / "catalogue.duckdb", night)


@pytest.mark.parametrize("as_json", [False, True])
def test_price_refuses_tp_2_for_a_model_with_9_heads(capsys, as_json):
    folder = SNAPSHOT / SMOL.replace("/", "__")
    code = main(["price", str(folder), "--tp", "2"] + (["--json"] if as_json else []))
    out, err = capsys.readouterr()
    assert code == 2
    if as_json:
        assert json.loads(out)["error"]["reason"] == "infeasible" and err == ""
    else:
        assert out == "" and err.count("\n") == 1 and err.startswith("speccat: infeasible: ")
        assert "9 attention heads are not divisible by tp 2" in err
    assert main(["price", str(folder), "--tp", "1", "--json"]) == 0  # tp 1 prices
    assert json.loads(capsys.readouterr().out)["setting"]["tp"] == 1
