"""`speccat report`: the site opened from disk in a real headless Chromium (the system's
chromium and chromedriver, through selenium), every page kind: no console error, every plot
drawn, the numbers the plots carry equal to the catalogue's rows for three models, and a
screenshot of each page kind under OUT/_screens/."""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from pathlib import Path

import duckdb
import pytest
from support import store_runs
from support.browser import chromium, console_errors, executables, open_page

from speccat.catalogue.records.settings import load_settings
from speccat.flows.cli import main
from speccat.report.site import model_file

GIB, MIB = 2**30, 2**20
THREE = ("meta-llama/Llama-3.1-8B-Instruct", "mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen3-Next-80B-A3B-Thinking")

@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, Path]:
    """The two-night test catalogue, with the table fits_on, and its report, written by the CLI."""
    db = store_runs.two_night_catalogue(fits_on=True)
    out = tmp_path_factory.mktemp("report") / "site"
    assert main(["report", str(out), "--db", str(db)]) == 0
    return db, out


@pytest.fixture(scope="module")
def browser():
    # never skipped: `make test` installs Debian's chromium and chromedriver (its `browser` step)
    assert None not in executables(), "chromium and chromedriver are not installed: `make test` installs them"
    with chromium() as driver:
        yield driver


def catalogue_rows(db: Path, text: str, params: list | None = None) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(text, params or []).fetchall()


def visit(browser, out: Path, page: str, screen: str, plots: bool = True) -> dict:
    """Open a page, check the console is clean and every plot drawn, save its screenshot."""
    started = time.perf_counter()
    open_page(browser, out / page)
    assert console_errors(browser) == []
    drawn = browser.execute_script(
        "return Array.from(document.querySelectorAll('div.plot')).map(p => ({id: p.id, traces: p.data.length,"
        " marks: p.querySelectorAll('.scatterlayer path, .barlayer path, .heatmaplayer image, .points path').length}))"
    )
    assert bool(drawn) == plots and all(p["traces"] > 0 and p["marks"] > 0 for p in drawn), drawn
    # nothing left the disk: every resource the page loaded is a file
    assert browser.execute_script("return performance.getEntriesByType('resource').every(e => e.name.startsWith('file:'))")
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1400, min(height + 40, 4000))
    (out / "_screens").mkdir(exist_ok=True)
    browser.save_screenshot(str(out / "_screens" / f"{screen}.png"))
    browser.set_window_size(1400, 1000)
    return {"plots": {p["id"]: p for p in drawn}, "seconds": time.perf_counter() - started}


def plot_data(browser, div: str) -> list[dict]:
    return browser.execute_script(f"return document.getElementById('{div}').data.map(t => ({{name: t.name, x: t.x, y: t.y, meta: t.meta || null, customdata: t.customdata || null}}))")


def test_the_site_is_written_whole_and_small(site):
    db, out = site
    manifest = json.loads((out / "_speccat_report.json").read_text())
    assert (out / "assets" / "plotly.min.js").stat().st_size > 1_000_000  # plotly's own bundle, no CDN
    for page in manifest["pages"]:
        text = (out / page).read_text()
        assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text, page
        assert (out / page).stat().st_size <= 2 * 2**20, page
    latest = {r[0] for r in catalogue_rows(db, "SELECT repo_id FROM latest_specs")}
    assert {model_file(r) for r in latest} <= set(manifest["pages"])
    # settings are written readably, never as the setting's hash
    setting_ids = [r[0] for r in catalogue_rows(db, "SELECT setting_id FROM settings")]
    index = (out / "index.html").read_text()
    assert "seq 4096 · tp 1 · sp · flash · bf16 · transformers" in index
    assert not any(s in index for s in setting_ids)


def test_a_folder_that_is_not_a_report_is_refused(site, tmp_path, capsys):
    db, _ = site
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["report", str(tmp_path), "--db", str(db)]) == 2
    assert "not a speccat report" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_index_lists_every_model_refusal_and_sorts_and_filters(site, browser):
    db, out = site
    seen = visit(browser, out, "index.html", "index", plots=False)
    assert seen["seconds"] < 15
    repos = set(browser.execute_script("return Array.from(document.querySelectorAll('#models tbody tr')).map(r => r.dataset.repo)"))
    failed = {r[0] for r in catalogue_rows(db, "SELECT unnest(repo_ids) FROM failures_by_reason WHERE run_id = (SELECT run_id FROM latest_run)")}
    specs = {r[0] for r in catalogue_rows(db, "SELECT repo_id FROM latest_specs")}
    assert repos == specs | failed and failed
    reasons = browser.execute_script("return Array.from(document.querySelectorAll('#models tbody tr td code')).map(c => c.textContent).filter(Boolean)")
    assert sorted(reasons) == sorted(r[0] for r in catalogue_rows(db, "SELECT reason FROM failures WHERE run_id = (SELECT run_id FROM latest_run)"))
    # no-recompute bytes per token of one layer at the default setting: the frontier's kept + saved over its tokens
    cells = browser.execute_script(
        "return Array.from(document.querySelectorAll('#models tbody tr')).filter(r => r.dataset.kind)"
        ".map(r => [r.dataset.repo, r.dataset.kind, Number(r.cells[5].dataset.value), Number(r.cells[8].dataset.value)])"
    )
    expected = dict(((r, k), (n, f)) for r, k, n, f in catalogue_rows(db, """
        SELECT p.repo_id, p.kind, p.total_bytes / s.seq_length, p.full_recompute_bytes / s.seq_length
        FROM planner_layer_prices AS p, chosen_settings AS s
        WHERE p.setting_id = s.setting_id AND p.mask = 0"""))  # fmt: skip
    assert len(cells) >= 5
    for repo, kind, none, full in cells:
        assert math.isclose(none, expected[(repo, kind)][0], rel_tol=1e-12) and math.isclose(full, expected[(repo, kind)][1], rel_tol=1e-12)
    # sort by parameters, descending, then filter to one family
    browser.execute_script("document.querySelectorAll('#models th')[2].click()")
    params = browser.execute_script("return Array.from(document.querySelectorAll('#models tbody tr')).map(r => r.cells[2].dataset.value).filter(Boolean).map(Number)")
    assert params == sorted(params, reverse=True) and len(set(params)) > 2
    browser.find_element("css selector", "input[data-filter=models]").send_keys("mixtral")
    visible = browser.execute_script("return Array.from(document.querySelectorAll('#models tbody tr')).filter(r => !r.hidden).map(r => r.dataset.repo)")
    assert visible and all("mixtral" in r.lower() for r in visible)


@pytest.mark.parametrize("repo", THREE)
def test_a_model_page_carries_the_catalogue_rows(site, browser, repo):
    db, out = site
    seen = visit(browser, out, model_file(repo), "model" if repo == THREE[0] else f"model-{repo.replace('/', '__')}")
    assert set(seen["plots"]) == {"memory", "ops", "frontier", "fits", "measured"}
    (config_hash,) = catalogue_rows(db, "SELECT config_hash FROM latest_specs WHERE repo_id = ?", [repo])[0]
    # memory against sequence length: every point a repo_curve row, in GiB, at every length of the
    # curve (settings.yaml's, beyond the grid's); where the grid prices the same setting, the
    # grid's price (repo_prices, the layer prices of every switch set) is the same number
    lengths = load_settings().curve
    for trace in plot_data(browser, "memory"):
        meta = trace["meta"]
        rows = dict(catalogue_rows(db, """SELECT seq_length_tokens, total_bytes FROM repo_curve WHERE config_hash = ? AND stack = ? AND tp_ranks = ?
                                          AND coalesce(mask, -1) = ?""", [config_hash, meta["stack"], meta["tp"], meta["mask"]]))  # fmt: skip
        assert trace["x"] == sorted(rows) == sorted({c["seq_length"] for c in lengths})
        assert all(math.isclose(y * GIB, rows[x], rel_tol=1e-12) for x, y in zip(trace["x"], trace["y"]))
        grid = dict(catalogue_rows(db, """SELECT seq_length, total FROM repo_prices WHERE config_hash = ? AND stack = ? AND tp = ? AND cp = 1
                                          AND micro_batch = 1 AND coalesce(mask, -1) = ?""", [config_hash, meta["stack"], meta["tp"], meta["mask"]]))  # fmt: skip
        assert len(grid) >= 3 and all(math.isclose(rows[x], grid[x], rel_tol=1e-12) for x in grid)
    # where the bytes go: each bar's stack of ops adds up to the layer's price (planner_layer_prices)
    # at the default setting, each segment a repo_op_prices row
    bars = plot_data(browser, "ops")
    stacked: dict[str, float] = {}
    for t in bars:
        for x, y in zip(t["x"], t["y"]):
            stacked[x] = stacked.get(x, 0.0) + y * MIB
    priced = {f"{k}<br>{n}": (total, full) for k, n, total, full in catalogue_rows(db, """
        SELECT p.kind, p.switch_set, p.total_bytes, p.full_recompute_bytes FROM planner_layer_prices AS p, chosen_settings AS s
        WHERE p.setting_id = s.setting_id AND p.repo_id = ?""", [repo])}  # fmt: skip
    full = {f"{k.split('<br>')[0]}<br>full": f for k, (_, f) in priced.items()}
    assert len(stacked) > len(full) >= 1
    for x, value in stacked.items():
        assert math.isclose(value, priced[x][0] if x in priced else full[x], rel_tol=1e-9), x
    ops = {(t["meta"]["part"], t["meta"]["op"]) for t in bars}
    assert ("ffn", "ffMM") in ops and ("norm", "normOp") in ops and ("full", "input") in ops
    # the frontier: each kind's points are the view's rows at the default setting
    frontier = catalogue_rows(db, """SELECT f.kind, f.overhead_pct, f.saved_bytes FROM frontier AS f, chosen_settings AS s
                                     WHERE f.setting_id = s.setting_id AND f.repo_id = ?""", [repo])  # fmt: skip
    traces = plot_data(browser, "frontier")
    carried = sorted((t["meta"]["kind"], x, y * MIB) for t in traces if t["meta"]["on_frontier"] for x, y in zip(t["x"], t["y"]))
    assert len(carried) == len(frontier) > 2
    for (k1, x1, y1), (k2, x2, y2) in zip(carried, sorted(frontier)):
        assert k1 == k2 and math.isclose(x1, x2, rel_tol=1e-12, abs_tol=1e-12) and math.isclose(y1, y2, rel_tol=1e-12, abs_tol=1e-6)
    # every other class a point too: with the frontier's, one per distinct representative of switch_costs
    off = sorted((t["meta"]["kind"], x, y * MIB) for t in traces if not t["meta"]["on_frontier"] for x, y in zip(t["x"], t["y"]))
    (distinct,) = catalogue_rows(db, """SELECT count(DISTINCT (c.kind, c.representative)) FROM switch_costs AS c, chosen_settings AS s, latest_run AS v
                                        WHERE c.setting_id = s.setting_id AND c.config_hash = ? AND c.records_version = v.records_version
                                          AND c.census_version = v.census_version AND c.torch_version = v.torch_version
                                          AND c.transformers_version = v.transformers_version""", [config_hash])[0]  # fmt: skip
    assert len(off) + len(carried) == distinct and len(off) > 0
    # the frontier's hover names the flags that give each point: full recompute is transformers' gradient checkpointing
    hovers = {c[0]: c[5] for t in traces if t["meta"]["on_frontier"] for c in t["customdata"]}
    assert "transformers: model.gradient_checkpointing_enable()" in hovers["full"] and "torchtitan: --activation_checkpoint.mode full" in hovers["full"]
    assert any(h.startswith("no framework's flags give it") for h in hovers.values())
    # priced against measured: every point of the view at the latest versions
    measured = sorted(catalogue_rows(db, """SELECT p.measured_per_token, p.priced_per_token FROM priced_vs_measured AS p JOIN latest_run AS v
                                           USING (census_version, transformers_version, torch_version, records_version)
                                           WHERE p.config_hash = ? AND p.measured_per_token IS NOT NULL""", [config_hash]))  # fmt: skip
    points = sorted((x, y) for t in plot_data(browser, "measured") if t["name"] != "priced = measured" for x, y in zip(t["x"], t["y"]))
    assert points == measured and len(points) >= 1
    # what fits: each cell is the table fits_on's answer (view repo_fits_on) on the default stack, its text the layout's
    fits = plot_data(browser, "fits")
    answers = {(g, s, m): (total, tp) for g, s, m, total, tp in catalogue_rows(db, """
        SELECT gpus, seq_length, gpu_mem_gib, total_bytes, tp FROM repo_fits_on
        WHERE repo_id = ? AND stack = (SELECT stack FROM setting_defaults)""", [repo])}  # fmt: skip
    assert [t["meta"]["gpu_mem_gib"] for t in fits] == [24, 40, 48, 80, 96, 141, 192]
    cells = 0
    for t in fits:
        meta = t["meta"]
        for g, row in zip(meta["gpus"], t["customdata"]):
            for s, value in zip(meta["seq_lengths"], row):
                total, tp = answers[(g, s, meta["gpu_mem_gib"])]
                assert value == total, (g, s, meta["gpu_mem_gib"])
                cells += value is not None
    assert 0 < cells < len(answers)  # some questions answered, some not (nothing fits one GPU of 24 GiB at 32k)


def test_compare_draws_the_chosen_models_from_repo_curve(site, browser):
    db, out = site
    visit(browser, out, "compare.html", "compare")
    boxes = browser.find_elements("css selector", ".picker input")
    for box in boxes:
        if box.is_selected():
            box.click()
    for box in boxes:
        if box.get_attribute("value") in THREE:
            box.click()
    traces = plot_data(browser, "compare")
    assert {t["meta"]["repo"] for t in traces} == set(THREE) and len(traces) == 6
    for t in traces:
        rows = dict(catalogue_rows(db, """SELECT seq_length_tokens, total_bytes FROM repo_curve WHERE repo_id = ? AND stack = 'transformers'
                                          AND tp_ranks = 1 AND switch_set = ?""", [t["meta"]["repo"], t["meta"]["switch_set"]]))  # fmt: skip
        assert t["x"] == sorted(rows) and all(math.isclose(y * GIB, rows[x], rel_tol=1e-12) for x, y in zip(t["x"], t["y"]))
    # at most six: a seventh box is disabled
    for box in boxes[:8]:
        if not box.is_selected() and box.is_enabled():
            box.click()
    assert len(plot_data(browser, "compare")) == 12
    assert sum(1 for b in boxes if not b.is_enabled()) == len(boxes) - 6


def test_changes_and_truth_pages(site, browser):
    db, out = site
    visit(browser, out, "changes.html", "changes")
    counts = {t: n for t, n in catalogue_rows(db, "SELECT change, count(*) FROM changes WHERE change <> 'bytes' GROUP BY ALL")}
    bars = plot_data(browser, "changes")[0]
    assert dict(zip(bars["x"], bars["y"])) == counts and {"added", "removed", "failing"} <= set(counts)
    visit(browser, out, "truth.html", "truth")
    ratios = sorted(r[0] for r in catalogue_rows(db, """SELECT p.ratio FROM priced_vs_measured AS p JOIN latest_run AS v
                                                       USING (census_version, transformers_version, torch_version, records_version)
                                                       JOIN latest_specs AS s USING (config_hash) WHERE p.measured_per_token IS NOT NULL"""))  # fmt: skip
    assert sorted(y for t in plot_data(browser, "truth") for y in t["y"]) == ratios
    shapes = browser.execute_script("return document.getElementById('truth').layout.shapes.map(s => [s.y0, s.y1])")
    assert [0.98, 1.02] in [[round(a, 6), round(b, 6)] for a, b in shapes]
    assert {p.name for p in (out / "_screens").iterdir()} >= {"changes.png", "compare.png", "index.png", "model.png", "truth.png"}


def test_a_catalogue_of_more_repos_than_the_report_draws_gets_pages_for_the_most_downloaded(site, tmp_path, monkeypatch):
    # report/pages.yaml bounds the pages a night of the whole Hub writes; here 2 of the night's repos.
    from speccat.report import data as report_data

    db, out = site
    real = report_data.pages()
    monkeypatch.setattr(report_data, "pages", lambda: {**real, "model_pages": 2})
    capped = tmp_path / "capped"
    assert main(["report", str(capped), "--db", str(db)]) == 0
    ordered = [r[0] for r in catalogue_rows(db, "SELECT repo_id FROM latest_specs ORDER BY downloads DESC NULLS LAST, repo_id")]
    assert len(ordered) > 2
    manifest = json.loads((capped / "_speccat_report.json").read_text())
    pages = {p for p in manifest["pages"] if p.startswith("models/")}
    assert pages == {model_file(r) for r in ordered[:2]}
    # a page drawn is the page the whole report draws, byte for byte: the bound reads those repos' rows whole
    for page in pages:
        assert (capped / page).read_bytes() == (out / page).read_bytes()
    index = (capped / "index.html").read_text()
    assert f"<b>{len(ordered)}</b> with a spec" in index and "<b>2</b> drawn here, the most downloaded" in index
    # and the queries read no other repo's rows
    with duckdb.connect(str(db), read_only=True) as con:
        cat = report_data.load(con)
    for per_repo in (cat.frontier["transformers"], cat.classes, cat.memory, cat.fits, cat.whole, cat.measured):
        assert per_repo and set(per_repo) <= set(ordered[:2])
    listed = set(re.findall(r'<tr data-repo="([^"]+)"', index))
    failed = {r[0] for r in catalogue_rows(db, "SELECT unnest(repo_ids) FROM failures_by_reason WHERE run_id = (SELECT run_id FROM latest_run)")}
    assert listed == set(ordered[:2]) | failed


def test_the_reports_reads_are_bounded_and_spill_into_a_directory_of_their_own(site, tmp_path, monkeypatch):
    """Unbounded, DuckDB may take 80% of the machine: on a first night of 480 configs the index's
    whole-rank query took 8 GiB, the night's peak. The report reads within pages.yaml's
    read_memory_mib, spilling into a directory that is gone after."""
    from speccat.report import data as report_data

    db, _ = site
    seen, real = [], report_data.load

    def recording(con):
        seen.append(con.execute("SELECT current_setting('memory_limit'), current_setting('temp_directory')").fetchone())
        return real(con)

    monkeypatch.setattr(report_data, "load", recording)
    assert main(["report", str(tmp_path / "bounded"), "--db", str(db)]) == 0
    ((limit, spill),) = seen
    with duckdb.connect() as con:
        default = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        con.execute(f"SET memory_limit = '{int(report_data.pages()['read_memory_mib'])}MiB'")
        expected = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert limit == expected != default
    assert Path(spill).name.startswith("speccat-report-") and not Path(spill).exists()
