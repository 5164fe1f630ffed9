"""catalogue/store/file.py: what a publish stores, idempotence, history, refusals and schema changes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil

import duckdb
import pytest
from support import store_runs as runs

from speccat.catalogue.vocabulary import OPS
from speccat.catalogue.store.night import StoreError
from speccat.catalogue.store.file import TABLES, open_readonly, publish, stored


@pytest.fixture(scope="module")
def night1(tmp_path_factory):
    path = tmp_path_factory.mktemp("night1") / "catalogue.duckdb"
    published = publish(path, runs.first_run())
    return path, published


def content(path) -> dict[str, list[tuple]]:
    with contextlib.closing(open_readonly(path)) as con:
        return runs.dump(con)


def leftovers(path) -> list:
    return sorted(p.name for p in path.parent.iterdir() if ".publish-" in p.name)


def test_first_publish_stores_the_run(night1):
    path, published = night1
    run = runs.first_run()
    specs = run.specs
    with contextlib.closing(open_readonly(path)) as con:
        assert con.execute("SELECT run_id, status, source, n_repos, n_configs, n_specs, n_failures FROM runs").fetchall() == [
            # 7 repos listed (6 + the gated one); DeepSeek-V3 and R1 share a config: 5 configs.
            ("night-1", "partial", "hub", 7, 5, 5, 1)
        ]
        assert {r[0] for r in con.execute("SELECT config_hash FROM configs").fetchall()} == set(specs)
        for config_hash, spec in specs.items():
            stored_spec, hidden, layers = con.execute(
                "SELECT spec, hidden_size, num_hidden_layers FROM specs WHERE config_hash = ?", [config_hash]
            ).fetchone()
            assert json.loads(stored_spec) == spec
            assert (hidden, layers) == (spec["hidden_size"], spec["num_hidden_layers"])
            stack = con.execute(
                "SELECT kind, count FROM stack WHERE config_hash = ? ORDER BY position", [config_hash]
            ).fetchall()
            assert stack == [(g["kind"], g["count"]) for g in spec["layers"]]
            kinds = con.execute(
                "SELECT kind, layers, attMM, attBMM, ffMM, softmax, dropout, normOp, gather, headCast, ffAct, linrec,"
                " attention, ffn, params_attention FROM kinds WHERE config_hash = ? ORDER BY kind",
                [config_hash],
            ).fetchall()
            expected = []
            for kind in sorted(spec["ops"]):
                ops = spec["ops"][kind]
                count = sum(g["count"] for g in spec["layers"] if g["kind"] == kind)
                flavours = spec["flavours"][kind]
                expected.append(
                    (kind, count, *(ops[o] for o in OPS), flavours["attention"], flavours["ffn"],
                     spec["params"]["kinds"][kind]["attention"])
                )
            assert kinds == expected
            measured = dict(
                ((k, op), b)
                for k, op, b in con.execute(
                    "SELECT kind, op::VARCHAR, bytes_per_token FROM measured WHERE config_hash = ?", [config_hash]
                ).fetchall()
            )
            assert measured == {
                (k, op): b for k, m in spec["measured"].items() for op, b in m["bytes_per_token"].items()
            }


def test_prices_are_the_pricing_tables(night1):
    path, _ = night1
    run = runs.first_run()
    with contextlib.closing(open_readonly(path)) as con:
        for config_hash, tables in run.prices.items():
            layer = tables.layer_prices
            got = con.execute(
                "SELECT kind, setting_id, mask, attention, ffn, norm, total, census_version, records_version"
                " FROM layer_prices WHERE config_hash = ? ORDER BY kind, setting_id, mask",
                [config_hash],
            ).fetchall()
            want = sorted(
                zip(*(layer.column(c).to_pylist() for c in ("kind", "setting_id", "mask", "attention", "ffn", "norm", "total"))),
                key=lambda r: (r[0], r[1], r[2]),
            )
            assert [r[:7] for r in got] == want
            assert {r[7:] for r in got} == {(run.census_version, run.records_version)}
            full = con.execute(
                "SELECT kind, setting_id, kept FROM full_prices WHERE config_hash = ? ORDER BY ALL", [config_hash]
            ).fetchall()
            assert full == sorted(zip(*(tables.full_prices.column(c).to_pylist() for c in ("kind", "setting_id", "kept"))))


COST_COLUMNS = ("kind", "setting_id", "mask", "recompute_flops", "recompute_bytes", "step_flops", "representative", "on_frontier")


def test_switch_costs_are_the_pricing_cost_tables(night1):
    path, _ = night1
    run = runs.first_run()
    with contextlib.closing(open_readonly(path)) as con:
        n_masks = con.execute("SELECT count(*) FROM switch_sets").fetchone()[0]
        for config_hash, tables in run.prices.items():
            got = con.execute(
                f"SELECT {', '.join(COST_COLUMNS)} FROM switch_costs WHERE config_hash = ? ORDER BY kind, setting_id, mask",
                [config_hash],
            ).fetchall()
            want = sorted(zip(*(tables.switch_costs.column(c).to_pylist() for c in COST_COLUMNS)), key=lambda r: r[:3])
            assert got == want
            assert len(got) == tables.full_prices.num_rows * (n_masks + 1)
            # full recompute (-1) re-runs the whole forward: no set recomputes more FLOPs
            by_group: dict = {}
            for row in got:
                by_group.setdefault(row[:2], {})[row[2]] = row
            for group in by_group.values():
                assert max(r[3] for r in group.values()) == group[-1][3] > 0
                assert group[0][3] == 0 and group[-1][6] == -1


def test_forward_flops_round_trip_into_measured_point_prices_and_the_view(night1):
    """The census's count stored on its kind's census rows of `measured`, costs.yaml's price on
    each point_prices row; the view sets them side by side, and the price at the census point is
    the full-recompute FLOPs that switch_costs holds for the same setting (priced apart, by
    price_spec)."""
    path, _ = night1
    run = runs.first_run()
    with contextlib.closing(open_readonly(path)) as con:
        for config_hash, spec in run.specs.items():
            stored = con.execute(
                "SELECT kind, point, forward_flops FROM measured WHERE config_hash = ? GROUP BY ALL ORDER BY ALL", [config_hash]
            ).fetchall()
            census = {(kind, flops) for kind, point, flops in stored if point == "census"}
            assert census == {(kind, m["forward_flops"]) for kind, m in spec["measured"].items()}
            assert all(flops > 0 for _, flops in census)
            prices = con.execute("SELECT kind, point, forward_flops FROM point_prices WHERE config_hash = ? ORDER BY ALL", [config_hash]).fetchall()
            assert prices == sorted((r["kind"], r["point"], r["forward_flops"]) for r in run.point_prices[config_hash])
            view = con.execute(
                "SELECT kind, seq_length, priced_forward_flops, measured_forward_flops, forward_flops_ratio FROM priced_vs_measured "
                "WHERE config_hash = ? AND point = 'census'",
                [config_hash],
            ).fetchall()
            assert len(view) == len(spec["measured"])
            for kind, seq, priced, counted, ratio in view:
                # the grid's row at the census's setting (one rank: sequence parallelism changes no FLOP)
                at = {"stack": "transformers", "seq_length": seq, "micro_batch": 1, "tp": 1, "cp": 1, "sequence_parallel": True}
                setting_id = runs.grid().setting(at)["setting_id"]
                full = con.execute(
                    "SELECT recompute_flops FROM switch_costs WHERE config_hash = ? AND kind = ? AND setting_id = ? AND mask = -1",
                    [config_hash, kind, setting_id],
                ).fetchone()[0]
                assert priced == pytest.approx(full, rel=1e-12) and counted == spec["measured"][kind]["forward_flops"]
                assert ratio == pytest.approx(priced / counted, rel=1e-12)


def test_a_catalogue_stored_before_switch_costs_gains_them(tmp_path, night1):
    """Prices stored without costs are not `priced` for the flow; pricing them again adds the costs."""
    path = tmp_path / "catalogue.duckdb"
    shutil.copyfile(night1[0], path)
    with contextlib.closing(duckdb.connect(str(path))) as con:
        before = sorted(con.execute("SELECT * FROM switch_costs").fetchall())
        con.execute("DROP TABLE switch_costs")
    run = runs.first_run()
    held = stored(path, run.census_version, run.records_version, setting_ids(runs.grid().settings))
    assert held.specs == frozenset(run.specs) and held.priced == frozenset()
    published = publish(path, run)
    assert published.rebuilt
    with contextlib.closing(open_readonly(path)) as con:
        assert sorted(con.execute("SELECT * FROM switch_costs").fetchall()) == before
    assert stored(path, run.census_version, run.records_version, setting_ids(runs.grid().settings)).priced == frozenset(run.specs)


def test_switch_sets_and_settings(night1):
    path, _ = night1
    run = runs.first_run()
    with contextlib.closing(open_readonly(path)) as con:
        rows = con.execute("SELECT mask, switches, n_recomputed, name FROM switch_sets ORDER BY mask").fetchall()
        assert len(rows) == 2 ** len(run.switches)
        for mask, switches, n, name in rows:
            # bit i of the mask set <=> switch i recomputed (sql/schema/tables/switch_sets.sql)
            assert switches == [s for i, s in enumerate(run.switches) if mask & (1 << i)]
            assert n == bin(mask).count("1")
        assert rows[0][3] == "none" and rows[-1][3] == "all"
        assert rows[5][3] == f"{run.switches[0]},{run.switches[2]}"  # 5 = bits 0 and 2
        settings = con.execute("SELECT * FROM settings ORDER BY setting_id").fetchall()
        assert len(settings) == len(run.settings)
        assert [dict(zip([d[0] for d in con.description], r)) for r in settings] == sorted(
            (dict(s) for s in run.settings), key=lambda s: s["setting_id"]
        )


def test_same_run_twice_is_identical(tmp_path, night1):
    path = tmp_path / "catalogue.duckdb"
    first = publish(path, runs.first_run())
    before = content(path)
    second = publish(path, runs.first_run())
    assert content(path) == before
    assert second.rows == first.rows
    assert not second.rebuilt
    assert leftovers(path) == []
    # and identical to the catalogue built once by the module fixture
    assert before == content(night1[0])


def test_second_run_adds_history_and_keeps_the_first(night1):
    night1_rows = content(night1[0])
    after = content(runs.two_night_catalogue())
    for table in TABLES:
        if table == "repos":  # the latest metadata of each repo, by design
            continue
        missing = set(night1_rows[table]) - set(after[table])
        assert not missing, f"{table} lost {len(missing)} row(s) of night 1"
    assert [r[0] for r in after["runs"]] == ["night-1", "night-2"]
    # history: 7 repos on night 1, 9 on night 2 (Qwen3-0.6B gone; Qwen3-8B and broken added... 6-1+1+2)
    with contextlib.closing(open_readonly(runs.two_night_catalogue())) as con:
        per_run = dict(con.execute("SELECT run_id, count(*) FROM repo_history GROUP BY ALL").fetchall())
        assert per_run == {"night-1": len(runs.first_run().repos), "night-2": len(runs.second_run().repos)}
        assert dict(con.execute("SELECT run_id, count(*) FROM failures GROUP BY ALL").fetchall()) == {
            "night-1": 1,
            "night-2": 3,
        }


def test_carried_rows_are_not_restaged(night1):
    """Night 2 brings specs and prices for its two new configs only; the others are carried."""
    second = runs.second_run()
    assert len(second.specs) == 2
    with contextlib.closing(open_readonly(runs.two_night_catalogue())) as con:
        n_specs = con.execute("SELECT count(*) FROM specs").fetchone()[0]
        assert n_specs == len(runs.first_run().specs) + len(second.specs)
        llama = runs.censused("meta-llama/Llama-3.1-8B-Instruct").config_hash
        carried = con.execute("SELECT * FROM layer_prices WHERE config_hash = ? ORDER BY ALL", [llama]).fetchall()
    with contextlib.closing(open_readonly(night1[0])) as con:
        original = con.execute("SELECT * FROM layer_prices WHERE config_hash = ? ORDER BY ALL", [llama]).fetchall()
    assert carried == original


def test_repos_hold_the_latest_metadata():
    with contextlib.closing(open_readonly(runs.two_night_catalogue())) as con:
        repos = {r[0]: r[1:] for r in con.execute("SELECT repo_id, sha, config_hash FROM repos").fetchall()}
    llama = runs.censused("meta-llama/Llama-3.1-8B-Instruct")
    assert repos[llama.repo_id] == (f"{llama.repo_id}@2", llama.config_hash)
    assert repos["mistralai/Mixtral-8x7B-v0.1"][1] == runs.censused(runs.NEW_CONFIG).config_hash
    # night 2 failed to fetch DeepSeek-V3 at the sha night 1 fetched: the config is the same
    assert repos["deepseek-ai/DeepSeek-V3"] == ("deepseek-ai/DeepSeek-V3@1", runs.censused("deepseek-ai/DeepSeek-V3").config_hash)
    # a repo only night 1 listed is kept; the failed ones have no config
    assert repos["Qwen/Qwen3-0.6B"][1] == runs.censused("Qwen/Qwen3-0.6B").config_hash
    assert repos[runs.BROKEN] == (None, None) and repos[runs.GATED] == (None, None)


def setting_ids(settings) -> list[str]:
    return [s["setting_id"] for s in settings]


def test_stored_tells_the_flow_what_to_skip(night1):
    run = runs.first_run()
    grid = setting_ids(runs.grid().settings)
    known = stored(night1[0], run.census_version, run.records_version, grid)
    assert known.specs == known.priced == frozenset(run.specs)
    assert stored(night1[0], "another-census", run.records_version, grid).specs == frozenset()
    assert stored(night1[0], run.census_version, "another-records", grid).priced == frozenset()
    # a grid with one setting the catalogue never priced: nothing is priced at all of it
    assert stored(night1[0], run.census_version, run.records_version, grid + ["new-setting"]).priced == frozenset()


def rows_at(run, settings) -> dict:
    """A run's end_prices, loss_prices, op_costs and op_prices cut down to some settings, as at_settings cuts its prices
    (keyword arguments of dataclasses.replace)."""
    ids = set(setting_ids(settings))
    return {
        name: {h: [row for row in rows if row["setting_id"] in ids] for h, rows in getattr(run, name).items()}
        for name in ("end_prices", "loss_prices", "op_costs", "op_prices")
    }


def at_settings(tables, settings):
    """A config's price tables cut down to some settings (what an older or newer grid priced)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pa.array(setting_ids(settings), pa.string())
    return dataclasses.replace(
        tables,
        layer_prices=tables.layer_prices.filter(pc.is_in(tables.layer_prices["setting_id"], value_set=ids)),
        full_prices=tables.full_prices.filter(pc.is_in(tables.full_prices["setting_id"], value_set=ids)),
        switch_costs=tables.switch_costs.filter(pc.is_in(tables.switch_costs["setting_id"], value_set=ids)),
    )


def test_a_new_grid_prices_stored_specs_again_and_keeps_the_old_prices(tmp_path):
    """Night 1 priced a grid of seq 4096 and 8192; night 2's grid is 8192 and 32768 and brings
    only prices (the flow prices stored specs again). The 8192 prices are in both nights and
    stored once; 4096, no longer in the grid, stays; 32768 is added."""
    grid = runs.grid().settings
    old = [s for s in grid if s["seq_length"] in (4096, 8192)]
    new = [s for s in grid if s["seq_length"] in (8192, 32768)]
    assert old and new and {s["seq_length"] for s in grid} == {4096, 8192, 32768}
    first = runs.first_run()
    night1 = dataclasses.replace(first, settings=old, prices={h: at_settings(t, old) for h, t in first.prices.items()}, **rows_at(first, old))
    path = tmp_path / "catalogue.duckdb"
    publish(path, night1)
    cv, rv = first.census_version, first.records_version
    assert stored(path, cv, rv, setting_ids(old)).priced == frozenset(first.specs)
    before = stored(path, cv, rv, setting_ids(new))
    assert before.specs == frozenset(first.specs) and before.priced == frozenset()

    items = [runs.censused(r) for r in runs.REPOS]
    night2 = dataclasses.replace(
        runs.make_run("night-2", items, day=2, new=()),
        settings=new,
        prices={h: at_settings(t, new) for h, t in first.prices.items()},
        **rows_at(first, new),
    )
    publish(path, night2)
    assert stored(path, cv, rv, setting_ids(new)).priced == frozenset(first.specs)
    assert stored(path, cv, rv, setting_ids(old)).priced == frozenset(first.specs)
    # old and new together are the whole grid: each config holds exactly its full price tables
    assert stored(path, cv, rv, setting_ids(grid)).priced == frozenset(first.specs)
    with contextlib.closing(open_readonly(path)) as con:
        assert con.execute("SELECT count(*) FROM settings").fetchone()[0] == len(grid)
        for config_hash, tables in first.prices.items():
            got = con.execute(
                "SELECT kind, setting_id, mask, total FROM layer_prices WHERE config_hash = ? ORDER BY ALL", [config_hash]
            ).fetchall()
            layer = tables.layer_prices
            assert got == sorted(zip(*(layer.column(c).to_pylist() for c in ("kind", "setting_id", "mask", "total"))))
            n_full = con.execute("SELECT count(*) FROM full_prices WHERE config_hash = ?", [config_hash]).fetchone()[0]
            assert n_full == tables.full_prices.num_rows


def test_a_different_raw_config_under_a_stored_hash_keeps_the_first(tmp_path, night1):
    """DeepSeek-V3 and R1 share a config_hash but not their raw JSON (transformers_version):
    storing the other one's config later is no conflict, and the first stays."""
    v3, r1 = runs.censused("deepseek-ai/DeepSeek-V3"), runs.censused("deepseek-ai/DeepSeek-R1")
    assert v3.config_hash == r1.config_hash and v3.config != r1.config
    path = tmp_path / "catalogue.duckdb"
    shutil.copyfile(night1[0], path)
    run = runs.first_run()
    first = run.configs[v3.config_hash]
    other = v3.config if first == r1.config else r1.config
    publish(path, dataclasses.replace(run, run_id="night-1b", configs={**run.configs, v3.config_hash: other}))
    with contextlib.closing(open_readonly(path)) as con:
        (config,) = con.execute("SELECT config FROM configs WHERE config_hash = ?", [v3.config_hash]).fetchone()
        assert con.execute("SELECT count(*) FROM configs").fetchone()[0] == len(run.configs)
    assert json.loads(config) == first
    # the spec tables keep their check: a changed spec under the same hash is still refused
    changed = {**run.specs, v3.config_hash: {**run.specs[v3.config_hash], "name": "another name"}}
    with pytest.raises(StoreError) as err:
        publish(path, dataclasses.replace(run, run_id="night-1c", configs={v3.config_hash: other}, specs=changed))
    assert err.value.reason == "conflict" and "configs" not in str(err.value)


def test_a_changed_spec_under_the_same_version_is_a_conflict(tmp_path, night1):
    path = tmp_path / "catalogue.duckdb"
    shutil.copyfile(night1[0], path)
    before = content(path)
    run = runs.first_run()
    llama = runs.censused("meta-llama/Llama-3.1-8B-Instruct").config_hash
    changed = dict(run.specs)
    changed[llama] = {**changed[llama], "name": "renamed without a new census version"}
    with pytest.raises(StoreError) as err:
        publish(path, dataclasses.replace(run, run_id="night-1b", specs=changed))
    assert err.value.reason == "conflict"
    assert f"specs {llama}" in str(err.value)
    assert content(path) == before
    assert leftovers(path) == []


def test_bad_codes_and_duplicate_keys_are_refused(tmp_path):
    run = runs.first_run()
    path = tmp_path / "catalogue.duckdb"
    bad_reason = dataclasses.replace(run, failures=[{**run.failures[0], "reason": "exploded"}])
    with pytest.raises(StoreError) as err:
        publish(path, bad_reason)
    assert err.value.reason == "bad_run" and "failures" in str(err.value)
    duplicate = dataclasses.replace(run, repos=list(run.repos) + [run.repos[0]])
    with pytest.raises(StoreError) as err:
        publish(path, duplicate)
    assert err.value.reason == "bad_run" and "repo_history" in str(err.value)
    assert not path.exists() and leftovers(path) == []


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("status", "exploded", "status"),
        ("versions", {"speccat": "1"}, "versions"),
        ("repos", [{"repo_id": "a/b", "stars": 3}], "unknown field"),
        ("repos", [{"repo_id": "a/b", "gated": "yes"}], "gated"),
    ],
)
def test_malformed_run_is_refused_naming_the_field(tmp_path, field, value, words):
    with pytest.raises(StoreError) as err:
        publish(tmp_path / "c.duckdb", dataclasses.replace(runs.first_run(), **{field: value}))
    assert err.value.reason == "bad_run" and words in str(err.value)


def test_incomplete_or_duplicated_prices_are_refused(tmp_path):
    import pyarrow as pa

    run = runs.first_run()
    config_hash, tables = next(iter(run.prices.items()))
    layer = tables.layer_prices
    short = layer.slice(0, layer.num_rows - 1)
    doubled = pa.concat_tables([short, layer.slice(0, 1)])  # as many rows, one key twice
    for bad in (short, doubled):
        with pytest.raises(StoreError) as err:
            publish(tmp_path / "c.duckdb", dataclasses.replace(run, prices={**run.prices, config_hash: dataclasses.replace(tables, layer_prices=bad)}))
        assert err.value.reason == "bad_run"
        assert config_hash in str(err.value) and "distinct (kind, setting, mask)" in str(err.value)
    assert not (tmp_path / "c.duckdb").exists()


def test_prices_without_a_spec_fail_the_checks(tmp_path):
    run = runs.first_run()
    config_hash = next(iter(run.specs))
    specs = {h: s for h, s in run.specs.items() if h != config_hash}
    with pytest.raises(StoreError) as err:
        publish(tmp_path / "c.duckdb", dataclasses.replace(run, specs=specs))
    assert err.value.reason == "check_failed"
    assert "prices cover every kind of the spec" in str(err.value) and config_hash in str(err.value)
    assert not (tmp_path / "c.duckdb").exists() and leftovers(tmp_path / "c.duckdb") == []


def test_settings_field_without_a_column_is_a_schema_error(tmp_path):
    run = runs.first_run()
    settings = [{**s, "pipeline_parallel": 2} for s in run.settings]
    with pytest.raises(StoreError) as err:
        publish(tmp_path / "c.duckdb", dataclasses.replace(run, settings=settings))
    assert err.value.reason == "schema" and "pipeline_parallel" in str(err.value)


def test_an_older_schema_is_rebuilt_without_losing_rows(tmp_path, night1):
    """A catalogue written before a column existed is carried into the current schema."""
    path = tmp_path / "catalogue.duckdb"
    shutil.copyfile(night1[0], path)
    with contextlib.closing(duckdb.connect(str(path))) as con:
        con.execute("ALTER TABLE configs DROP COLUMN model_type")
    old = content(path)
    published = publish(path, runs.second_run())
    assert published.rebuilt
    new = content(path)
    for table in TABLES:
        if table in ("repos", "configs"):
            continue
        assert set(old[table]) <= set(new[table]), table
    with contextlib.closing(open_readonly(path)) as con:
        # the old configs come back with model_type NULL, the night's new ones have it
        assert con.execute("SELECT count(*) FROM configs WHERE model_type IS NULL").fetchone()[0] == len(old["configs"])
        assert con.execute("SELECT count(*) FROM configs").fetchone()[0] == len(old["configs"]) + 2


def test_a_schema_that_would_drop_a_column_is_refused(tmp_path, night1):
    path = tmp_path / "catalogue.duckdb"
    shutil.copyfile(night1[0], path)
    with contextlib.closing(duckdb.connect(str(path))) as con:
        con.execute("ALTER TABLE runs ADD COLUMN operator VARCHAR")
    before = content(path)
    with pytest.raises(StoreError) as err:
        publish(path, runs.second_run())
    assert err.value.reason == "schema" and "operator" in str(err.value)
    assert content(path) == before
