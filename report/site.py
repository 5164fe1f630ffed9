"""Writing the site: index.html, models/<repo>.html, compare.html, changes.html, truth.html and
assets/ (plotly.min.js from plotly's own package, the stylesheet and the page script).

The site is built in a sibling folder and swapped in whole, as `speccat export` does: a reader
never sees half a report, and a folder that is not a report is refused, never overwritten."""

from __future__ import annotations

import html
import json
import os
import shutil
import tempfile
import time
from collections import defaultdict
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from speccat.catalogue.store.bounds import bound, spill_directory
from speccat.report import data as report_data
from speccat.report import figures, readable

MANIFEST = "_speccat_report.json"
ASSETS = ("report.css", "report.js")


def model_file(repo_id: str) -> str:
    """A model page's path under the site: models/<owner>__<name>.html."""
    return "models/" + repo_id.replace("/", "__") + ".html"


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _bytes_cell(value: float | None) -> str:
    """A number cell sorted by its exact value, shown to the byte."""
    if value is None:
        return '<td class="num" data-value=""></td>'
    return f'<td class="num" data-value="{value!r}">{value:,.0f}</td>'


def _figure(div_id: str, figure: dict, note: str = "") -> str:
    """A plot's div and its figure as JSON, drawn by assets/report.js with Plotly.newPlot."""
    text = json.dumps(figure, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")
    caption = f'<p class="note">{note}</p>' if note else ""
    return f'<div class="plot" id="{div_id}"></div>\n<script type="application/json" data-figure="{div_id}">{text}</script>\n{caption}'


class Writer:
    def __init__(self, cat: report_data.Catalogue, out: Path):
        self.cat, self.out = cat, out
        self.template = Template(resources.files(__package__).joinpath("templates/page.html").read_text())
        run = cat.run or {}
        self.night = (f"night {str(run.get('started', ''))[:16]} UTC · {run.get('status', '')} · {run.get('source', '')} · "
                      f"transformers {run.get('transformers_version', '')} · torch {run.get('torch_version', '')}") if run else "no good night stored"  # fmt: skip
        self.default = cat.defaults.get("transformers")
        self.default_label = readable.setting(self.default) if self.default else ""

    def page(self, path: str, title: str, body: str, kind: str) -> int:
        root = "../" * path.count("/")
        text = self.template.substitute(title=_esc(title), root=root, body=body, night=_esc(self.night), page=kind)
        target = self.out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return len(text.encode())

    def index(self) -> None:
        cat, run = self.cat, self.cat.run or {}
        rows = figures.index_rows(cat)
        priced = {r["repo_id"] for r in rows if r["status"] == "priced"}
        first = report_data.layouts()["index"]
        gpus = list(first)
        figures_of = {
            "listed": run.get("n_repos"), "configs": run.get("n_configs"), "with a spec": cat.with_spec,
            "priced": len(priced), "refused or failed": len(cat.refusals),
        }  # fmt: skip
        drawn_all = len(cat.models) == cat.with_spec
        if not drawn_all:  # the priced are counted among the models drawn
            figures_of.pop("priced")
            figures_of.update({"drawn here, the most downloaded": len(cat.models), "of them priced": len(priced)})
        coverage = " ".join(f"<span><b>{_esc(v)}</b> {k}</span>" for k, v in figures_of.items())
        if run.get("n_repos") and drawn_all:
            coverage += f"<span><b>{100 * len(priced) / run['n_repos']:.1f}%</b> of listed repos priced</span>"
        head = [("model", "text"), ("family", "text"), ("params", "num"), ("layers", "num"), ("kind (layers)", "text"),
                ("none B/token", "num"), ("best selective B/token", "num"), ("best set", "text"), ("full B/token", "num")]  # fmt: skip
        head += [(f"{g} GPU{'s' * (g > 1)}: {readable.layout(**{k: first[g][k] for k in ('tp', 'pp', 'dp', 'zero')})}, none", "num") for g in gpus]
        head += [("status", "text"), ("reason", "text")]
        body_rows = []
        for r in rows:
            link = f'<a href="{model_file(r["repo_id"])}">{_esc(r["repo_id"])}</a>' if r["status"] != "spec, not priced" and r["reason"] == "" else _esc(r["repo_id"])
            cells = [f"<td>{link}</td>", f"<td>{_esc(r['family'])}</td>",
                     f'<td class="num" data-value="{r["params"] or ""}">{readable.count(r["params"])}</td>',
                     f'<td class="num">{_esc(r["layers"])}</td>',
                     "<td>" + _esc(r["kind"]) + (f" ({r['kind_layers']})" if r["kind_layers"] else "") + "</td>"]  # fmt: skip
            for key in ("none", "best", "best_set", "full"):
                cells.append(_bytes_cell(r[key]) if key != "best_set" else f"<td>{_esc(r[key])}</td>")
            for g in gpus:
                v = r["whole"].get(g)
                cells.append(f'<td class="num" data-value="{v if v is not None else ""}">{readable.nbytes(v)}</td>')
            cells += [f"<td>{_esc(r['status'])}</td>", f"<td><code>{_esc(r['reason'])}</code></td>"]
            body_rows.append(f'<tr data-repo="{_esc(r["repo_id"])}" data-kind="{_esc(r["kind"])}">' + "".join(cells) + "</tr>")
        th = "".join(f'<th data-sort="{t}" class="{t}">{_esc(h)}</th>' for h, t in head)
        body = f"""<p class="coverage">{coverage}</p>
<p class="note">One row per layer kind of every model priced, per refused repo, and per model with a spec but no price.
Bytes per token are one layer's, per rank, at the grid's default setting ({_esc(self.default_label)}), from the view
<code>frontier</code>: no recompute, the frontier's set keeping the fewest bytes, and full recompute. Whole-rank memory
(weights, gradients, optimizer states, activations, ends) is the view <code>rank_fits</code> at that sequence length, no recompute.
Click a column to sort; type to filter.</p>
<input type="search" placeholder="filter: a repo, family, kind, reason…" data-filter="models">
<table id="models" class="sortable"><thead><tr>{th}</tr></thead><tbody>
{chr(10).join(body_rows)}
</tbody></table>"""
        self.page("index.html", "speccat: activation memory of every model in the catalogue", body, "index")

    def model(self, m: dict) -> int:
        cat, repo = self.cat, m["repo_id"]
        parts = [f'<p class="note">{_esc(m["model_type"])} · {_esc(m["arch"])} · {readable.count(m["params"])} parameters · '
                 f'{_esc(m["num_hidden_layers"])} layers · hidden {_esc(m["hidden_size"])}'
                 + (f" · {m['num_experts']} experts" if m["num_experts"] else "") + "</p>"]  # fmt: skip
        memory = cat.memory.get(repo, [])
        if memory:
            parts.append("<h2>Memory against sequence length</h2>")
            parts.append(_figure("memory", figures.memory_vs_seq(memory, f"{repo}: the layer stack per rank, one micro-batch"),
                                 "One line per switch set on the frontier at a stack's default setting, and full recompute; solid: transformers, "
                                 "dashed: megatron. Every length of the memory curve, the grid's and beyond (view <code>repo_curve</code>)."))  # fmt: skip
        if cat.ops.get(repo):
            parts.append("<h2>Where the bytes go</h2>")
            parts.append(_figure("ops", figures.ops(cat.ops[repo], self.default_label),
                                 "One layer of each kind op by op (the records' ops and parts, each in its part of the layer), for no recompute, "
                                 "each frontier set and full recompute (view <code>repo_op_prices</code>)."))
        front = cat.frontier.get("transformers", {}).get(repo)
        if front:
            parts.append("<h2>The frontier</h2>")
            parts.append(_figure("frontier", figures.frontier(front, cat.classes.get(repo, []), self.default_label),
                                 "Each point a class of equivalent switch sets (same bytes, same recompute cost). Joined: the frontier, the classes "
                                 "no other beats on both bytes and recompute cost, the hover naming its sets and the framework flags that give it "
                                 "(view <code>frontier_flags</code>); open circles: every other class (view <code>switch_classes</code>)."))
        if cat.fits.get(repo) and cat.memory_sizes:
            parts.append("<h2>What fits</h2>")
            parts.append(_figure("fits", figures.fits(cat.fits[repo], cat.memory_sizes, cat.seq_lengths),
                                 "Each cell the layout and switch set <code>speccat fit</code> lists first on that many GPUs of that memory "
                                 "(the fewest estimated recompute seconds per sequence, then the fewest bytes on the fullest rank), of every "
                                 "layout and switch set, and what that rank holds; view <code>repo_fits_on</code> (the table fits_on)."))
        if cat.measured.get(repo):
            parts.append("<h2>Priced against measured</h2>")
            parts.append(_figure("measured", figures.measured(cat.measured[repo], f"{repo}: the records' price against the census's measurement"),
                                 "Every measurement point of every kind, with the cause of a ratio more than 0.5% from 1 in the hover (view <code>priced_vs_measured</code>)."))
        return self.page(model_file(repo), repo, "\n".join(parts), "model")

    def compare(self) -> None:
        models: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        for repo, rs in self.cat.memory.items():
            for r in sorted(rs, key=lambda r: r["seq_length"]):
                if r["stack"] == "transformers" and r["tp"] == 1 and r["switch_set"] in ("none", "full"):
                    models[repo][r["switch_set"]].append([r["seq_length"], r["total"]])
        order = [m["repo_id"] for m in self.cat.models if m["repo_id"] in models]
        picker = "\n".join(f'<label><input type="checkbox" value="{_esc(r)}"{" checked" if i < 3 else ""}> {_esc(r)}</label><br>' for i, r in enumerate(order))
        spec = {"title": "The layer stack per rank: no recompute (solid) and full recompute (dotted), tp 1, transformers", "models": models}
        text = json.dumps(spec, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")
        body = f"""<p class="note">Choose up to six models; each is drawn from the view <code>repo_curve</code> at the memory curve's sequence lengths, tp 1, the transformers stack.</p>
<div class="picker">{picker}</div>
<div class="plot" id="compare"></div>
<script type="application/json" id="compare-data">{text}</script>"""
        self.page("compare.html", "Compare models", body, "compare")

    def changes(self) -> None:
        rows, run = self.cat.changes, self.cat.run or {}
        if rows:
            r0 = rows[0]
            versions = (f"transformers {_esc(r0['old_transformers_version'])} → {_esc(r0['new_transformers_version'])}, "
                        f"torch {_esc(r0['old_torch_version'])} → {_esc(r0['new_torch_version'])}")  # fmt: skip
        else:
            versions = f"transformers {_esc(run.get('transformers_version'))}, torch {_esc(run.get('torch_version'))}"
        cols = ("repo_id", "change", "kind", "old_priced_per_token", "new_priced_per_token", "priced_change_pct",
                "old_measured_per_token", "new_measured_per_token", "measured_change_pct", "repriced_because",
                "failed_stage", "failed_reason", "old_config_hash", "new_config_hash")  # fmt: skip
        units = {"old_priced_per_token": " (B/token)", "new_priced_per_token": " (B/token)", "old_measured_per_token": " (B/token)",
                 "new_measured_per_token": " (B/token)", "priced_change_pct": " (%)", "measured_change_pct": " (%)"}  # fmt: skip
        th = "".join(f'<th data-sort="{"num" if c in units else "text"}">{_esc(c + units.get(c, ""))}</th>' for c in cols)

        def cell(c: str, v: Any) -> str:
            if isinstance(v, float):
                return f'<td class="num" data-value="{v}">{v:,.2f}</td>'
            return f"<td>{_esc(v)}</td>"

        trs = "\n".join("<tr>" + "".join(cell(c, r.get(c)) for c in cols) + "</tr>" for r in rows)
        body = f"""<p class="note">Between the two latest good nights (view <code>changes</code>): {versions}.
{len(rows)} rows: repos added, removed, with a new config or sha, repriced, still failing, and per layer kind the bytes that moved.</p>
{_figure("changes", figures.changes(rows))}
<input type="search" placeholder="filter…" data-filter="change-rows">
<table id="change-rows" class="sortable"><thead><tr>{th}</tr></thead><tbody>
{trs}
</tbody></table>"""
        self.page("changes.html", "Changes since the night before", body, "changes")

    def truth(self) -> None:
        rows = [r for rs in self.cat.measured.values() for r in rs]
        off = sum(1 for r in rows if r["cause"])
        body = f"""<p class="note">{len(rows)} points of {len({(r['repo_id'], r['kind']) for r in rows})} kinds (view <code>priced_vs_measured</code>, the latest versions):
{len(rows) - off} within 0.5% of what the census measured, {off} beyond it with a cause named. The wide band is the records' tolerance
(catalogue/records/records.yaml), beyond which a spec is not priced.</p>
{_figure("truth", figures.truth(rows, self.cat.tolerance))}"""
        self.page("truth.html", "Truth: priced against measured", body, "truth")


def write(cat: report_data.Catalogue, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Write the whole site into `out_dir` (replaced whole if it is a report already); returns
    the manifest: pages, sizes and the night shown."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).is_file())):
        raise FileExistsError(f"{out} exists and is not a speccat report; refusing to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    building.chmod(0o755)  # mkdtemp's folder is the owner's only; a site is for reading
    try:
        started = time.perf_counter()
        (building / "assets").mkdir()
        from plotly.offline import get_plotlyjs

        (building / "assets" / "plotly.min.js").write_text(get_plotlyjs())
        for name in ASSETS:
            shutil.copyfile(resources.files(__package__).joinpath(f"assets/{name}"), building / "assets" / name)
        writer = Writer(cat, building)
        writer.index()
        sizes = {m["repo_id"]: writer.model(m) for m in cat.models if m["repo_id"] in cat.memory or m["repo_id"] in cat.measured}
        writer.compare()
        writer.changes()
        writer.truth()
        manifest = {"run_id": (cat.run or {}).get("run_id"), "models": len(sizes), "largest_model_page_bytes": max(sizes.values(), default=0),
                    "pages": ["index.html", "compare.html", "changes.html", "truth.html"] + [model_file(r) for r in sizes],
                    "write_s": round(time.perf_counter() - started, 3)}  # fmt: skip
        (building / MANIFEST).write_text(json.dumps(manifest, indent=1))
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
            os.replace(building, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(building, out)
        return manifest
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise


def build(con, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Read the catalogue on `con` (read-only), within pages.yaml's `read_memory_mib` (spilling
    past it), and write its report into `out_dir`."""
    started = time.perf_counter()
    with spill_directory(prefix="speccat-report-") as spill:
        bound(con, spill, report_data.pages()["read_memory_mib"])
        cat = report_data.load(con)
    read_s = time.perf_counter() - started
    manifest = write(cat, out_dir)
    manifest["read_s"] = round(read_s, 3)
    (Path(out_dir) / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest
