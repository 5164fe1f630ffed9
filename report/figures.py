"""The report's plots as plotly figure dicts ({"data": [...], "layout": {...}}), each drawn from
the rows of one sql/report query. The numbers a trace carries are the rows' own: bytes in the
unit its axis names (GiB or MiB, an exact power of two), percentages and ratios as stored."""

from __future__ import annotations

from collections import defaultdict
from functools import cache
from typing import Any

from speccat.report import readable
from speccat.report.data import FULL, Catalogue, layouts

GIB, MIB = readable.GIB, readable.MIB
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
FONT = {"family": "system-ui, sans-serif", "size": 12}


def _layout(title: str, **extra: Any) -> dict:
    return {"title": {"text": title}, "font": FONT, "margin": {"t": 60, "l": 70, "r": 20, "b": 60},
            "hovermode": "closest", "legend": {"orientation": "h", "y": -0.2}, **extra}  # fmt: skip


@cache
def _curve_setting(seq_length: int, tp: int, cp: int, stack: str) -> str:
    """A point of the memory curve's setting in words (the query memory's setting columns), written
    once per setting: a report labels hundreds of thousands of points with a few dozen settings."""
    return readable.setting({"seq_length": seq_length, "tp": tp, "cp": cp, "stack": stack})


def memory_vs_seq(rows: list[dict], title: str) -> dict:
    """Whole layer stack per rank against sequence length (log axes), at tp 1 and tp 8: one line
    per switch set and stack (rows of the query memory)."""
    tps = sorted({r["tp"] for r in rows})
    colours: dict[str, str] = {}
    lines: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        lines[(r["tp"], r["stack"], r["mask"], r["switch_set"])].append(r)
    data = []
    for (tp, stack, mask, name), points in sorted(lines.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] == FULL, kv[0][2])):
        points.sort(key=lambda r: r["seq_length"])
        colour = colours.setdefault(name, PALETTE[len(colours) % len(PALETTE)])
        axis = tps.index(tp) + 1
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": f"{name} · {stack}",
            "legendgroup": f"{name} · {stack}", "showlegend": axis == 1,
            "x": [p["seq_length"] for p in points], "y": [p["total"] / GIB for p in points],
            "customdata": [[readable.nbytes(p["total"]), _curve_setting(p["seq_length"], tp, p["cp"], stack)] for p in points],
            "hovertemplate": f"<b>{name}</b> · {stack}<br>%{{customdata[1]}}<br>%{{customdata[0]}}<extra></extra>",
            "line": {"color": colour, "dash": "solid" if stack == "transformers" else "dash"},
            "xaxis": f"x{axis if axis > 1 else ''}", "yaxis": f"y{axis if axis > 1 else ''}",
            "meta": {"tp": tp, "stack": stack, "mask": mask},
        })  # fmt: skip
    layout = _layout(title, height=480)
    width = 1 / max(len(tps), 1)
    for i, tp in enumerate(tps):
        suffix = str(i + 1) if i else ""
        layout[f"xaxis{suffix}"] = {"type": "log", "title": {"text": f"sequence length (tokens), tp {tp}"},
                                    "domain": [i * width + (0.04 if i else 0), (i + 1) * width - (0.04 if i + 1 < len(tps) else 0)],
                                    "anchor": f"y{suffix}"}  # fmt: skip
        layout[f"yaxis{suffix}"] = {"type": "log", "title": {"text": "layer stack per rank (GiB)"}, "anchor": f"x{suffix}"}
    return {"data": data, "layout": layout}


def ops(rows: list[dict], setting_label: str) -> dict:
    """Where one layer's bytes go, op by op, per kind: no recompute, each frontier set and full
    recompute (rows of the query ops); a trace per (part, op) that keeps bytes under some set."""
    bars = list(dict.fromkeys((r["kind"], r["mask"], r["switch_set"]) for r in rows))
    bars.sort(key=lambda b: (b[0], -sum(r["kept_bytes"] for r in rows if (r["kind"], r["mask"]) == b[:2])))
    kept = {(r["kind"], r["mask"], r["part"], r["op"]): r["kept_bytes"] for r in rows}
    shares = [pair for pair in dict.fromkeys((r["part"], r["op"]) for r in rows) if any(kept[(k, m, *pair)] for k, m, _ in bars)]
    categories = [f"{kind}<br>{name}" for kind, _, name in bars]
    data = [
        {"type": "bar", "name": f"{part} · {op}", "x": categories, "y": [kept[(kind, mask, part, op)] / MIB for kind, mask, _ in bars],
         "marker": {"color": PALETTE[i % len(PALETTE)]}, "meta": {"part": part, "op": op},
         "hovertemplate": f"{part} · {op}: %{{y:.2f}} MiB<extra>%{{x}}</extra>"}
        for i, (part, op) in enumerate(shares)
    ]  # fmt: skip
    full = {r["kind"]: r["full_recompute_bytes"] for r in rows}
    data.append({"type": "bar", "name": "full recompute (the layer's input)", "x": [f"{k}<br>full" for k in full],
                 "y": [v / MIB for v in full.values()], "marker": {"color": "#444"}, "meta": {"part": "full", "op": "input"},
                 "hovertemplate": "full recompute: %{y:.2f} MiB<extra>%{x}</extra>"})  # fmt: skip
    layout = _layout(f"Where one layer's bytes go, op by op, per rank ({setting_label})", barmode="stack", height=480,
                     yaxis={"title": {"text": "one layer, per rank (MiB)"}}, xaxis={"title": {"text": "kind and switch set"}})  # fmt: skip
    return {"data": data, "layout": layout}


def flags(row: dict) -> str:
    """The framework flags that give a frontier class (frontier_flags), or that none does."""
    if row.get("no_framework", True):
        return "no framework's flags give it (a torch selective-checkpoint policy can)"
    return "<br>".join(f"{f['framework']}: {f['command']}" for f in row["flags"])


def frontier(rows: list[dict], classes: list[dict], setting_label: str) -> dict:
    """Bytes saved against recompute overhead per kind: one point per class of the frontier,
    joined (rows of the query frontier), and one per class off it (rows of the query classes)."""
    per_kind: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        per_kind[r["kind"]].append(r)
    off: dict[str, list[dict]] = defaultdict(list)
    for r in classes:
        if not r["on_frontier"]:
            off[r["kind"]].append(r)
    data = []
    for i, (kind, points) in enumerate(sorted(per_kind.items())):
        points = sorted(points, key=lambda r: (r["overhead_pct"] or 0, -(r["saved_bytes"] or 0)))
        colour = PALETTE[i % len(PALETTE)]
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": f"{kind} ({points[0]['layers_count']} layers)",
            "x": [p["overhead_pct"] for p in points], "y": [p["saved_bytes"] / MIB for p in points],
            "customdata": [[p["switch_set"], _equivalents(p), p["n_equivalent_count"], p["saved_pct"], readable.nbytes(p["kept_bytes"]), flags(p)] for p in points],
            "hovertemplate": "<b>%{customdata[0]}</b><br>saves %{y:.1f} MiB (%{customdata[3]:.1f}%), keeps %{customdata[4]}"
                             "<br>overhead %{x:.2f}% of the step<br>%{customdata[2]} equivalent sets: %{customdata[1]}"
                             "<br>%{customdata[5]}<extra></extra>",
            "line": {"color": colour}, "meta": {"kind": kind, "on_frontier": True},
        })  # fmt: skip
        beaten = off.get(kind, [])
        data.append({
            "type": "scatter", "mode": "markers", "name": f"{kind}: sets off the frontier", "legendgroup": kind,
            "x": [p["overhead_pct"] for p in beaten], "y": [p["saved_bytes"] / MIB for p in beaten],
            "marker": {"color": colour, "symbol": "circle-open", "size": 6, "opacity": 0.6},
            "customdata": [[p["switch_set"], _equivalents(p), p["n_equivalent_count"], p["saved_pct"], readable.nbytes(p["kept_bytes"])] for p in beaten],
            "hovertemplate": "<b>%{customdata[0]}</b> (off the frontier)<br>saves %{y:.1f} MiB (%{customdata[3]:.1f}%), keeps %{customdata[4]}"
                             "<br>overhead %{x:.2f}% of the step<br>%{customdata[2]} equivalent sets: %{customdata[1]}<extra></extra>",
            "meta": {"kind": kind, "on_frontier": False},
        })  # fmt: skip
    layout = _layout(f"Switch sets: bytes saved against recompute overhead, one layer per rank ({setting_label})", height=480,
                     xaxis={"title": {"text": "recompute overhead (% of the layer's forward + backward FLOPs)"}},
                     yaxis={"title": {"text": "saved against no recompute, one layer (MiB)"}})  # fmt: skip
    return {"data": data, "layout": layout}


def _equivalents(row: dict) -> str:
    """A class's sets, the first six named."""
    return ", ".join(row["equivalents"][:6]) + (" …" if len(row["equivalents"]) > 6 else "")


def fits(rows: list[dict], memory_sizes: list[dict], seq_lengths: list[int]) -> dict:
    """What fits: GPU count × sequence length, one heatmap per memory size, each cell the layout
    and switch set `speccat fit` lists first and its total per rank (rows of the query fits, from
    the table fits_on)."""
    gpus = sorted({r["gpus"] for r in rows})
    cell = {(r["gpus"], r["seq_length"], r["gpu_mem_gib"]): r for r in rows}
    largest = max(m["gpu_mem_gib"] for m in memory_sizes)
    # a panel per memory size, a row of cells per GPU count, each tall enough for its two lines of text
    data, layout = [], _layout("What fits: the best layout, per GPU count and sequence length", height=120 + len(memory_sizes) * (50 + 30 * len(gpus)))
    n = len(memory_sizes)
    for i, size in enumerate(memory_sizes):
        suffix = str(i + 1) if i else ""
        z, text, custom = [], [], []
        for g in gpus:
            zr, tr, cr = [], [], []
            for s in seq_lengths:
                r = cell.get((g, s, size["gpu_mem_gib"]))
                r = r if r and r["fits"] else None
                zr.append(r["total_bytes"] / GIB if r else None)
                tr.append(f"{readable.layout(r['tp'], r['pp'], r['dp'], int(r['zero']), r['cp'], r['ep'])} · {r['switch_set']}<br>"
                          f"{r['total_bytes'] / GIB:.1f} GiB" if r else "nothing fits")  # fmt: skip
                cr.append(r["total_bytes"] if r else None)
            z.append(zr), text.append(tr), custom.append(cr)
        label = f"{size['gpu_mem_gib']} GiB ({size['accelerators']})"
        data.append({"type": "heatmap", "name": label, "x": [str(s) for s in seq_lengths], "y": [f"{g} GPU{'s' * (g > 1)}" for g in gpus],
                     "z": z, "text": text, "customdata": custom, "texttemplate": "%{text}", "zmin": 0, "zmax": largest,
                     "colorscale": "Blues", "showscale": i == 0, "colorbar": {"title": {"text": "GiB per rank"}},
                     "hovertemplate": f"{label}<br>%{{y}}, seq %{{x}}<br>%{{text}}<extra></extra>",
                     "meta": {"gpu_mem_gib": size["gpu_mem_gib"], "gpus": gpus, "seq_lengths": seq_lengths},
                     "xaxis": f"x{suffix}", "yaxis": f"y{suffix}"})  # fmt: skip
        top, bottom = 1 - i / n, 1 - (i + 1) / n
        layout[f"xaxis{suffix}"] = {"type": "category", "anchor": f"y{suffix}", "title": {"text": "sequence length (tokens)" if i == n - 1 else ""}}
        layout[f"yaxis{suffix}"] = {"type": "category", "domain": [bottom + 0.03, top - 0.005], "anchor": f"x{suffix}",
                                    "title": {"text": f"{size['gpu_mem_gib']} GiB"}}  # fmt: skip
    return {"data": data, "layout": layout}


def measured(rows: list[dict], title: str) -> dict:
    """Priced against measured, bytes per token of one layer, per kind, every point (rows of the
    query measured); the line priced = measured."""
    per_kind: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        per_kind[r["kind"]].append(r)
    data = []
    for i, (kind, points) in enumerate(sorted(per_kind.items())):
        data.append({
            "type": "scatter", "mode": "markers", "name": kind, "marker": {"color": PALETTE[i % len(PALETTE)], "size": 8},
            "x": [p["measured_per_token"] for p in points], "y": [p["priced_per_token"] for p in points],
            "customdata": [[p["point"], p["ratio"], p["cause"] or "within 0.5%"] for p in points],
            "hovertemplate": "<b>%{customdata[0]}</b><br>measured %{x:,.0f} B/token, priced %{y:,.0f} B/token"
                             "<br>ratio %{customdata[1]:.4f}: %{customdata[2]}<extra>" + kind + "</extra>",
        })  # fmt: skip
    values = [v for r in rows for v in (r["measured_per_token"], r["priced_per_token"]) if v]
    if values:
        lo, hi = min(values) * 0.8, max(values) * 1.25
        data.append({"type": "scatter", "mode": "lines", "name": "priced = measured", "x": [lo, hi], "y": [lo, hi],
                     "line": {"color": "#999", "dash": "dot"}, "hoverinfo": "skip"})  # fmt: skip
    layout = _layout(title, height=460, xaxis={"type": "log", "title": {"text": "measured, one layer (bytes/token)"}},
                     yaxis={"type": "log", "title": {"text": "priced, one layer (bytes/token)"}})  # fmt: skip
    return {"data": data, "layout": layout}


def truth(rows: list[dict], tolerance: float) -> dict:
    """Priced over measured for every repo, kind and point as one plot, the records' tolerance
    and the 0.5% within which no cause is named drawn as bands (rows of the query measured)."""
    per_point: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        per_point[r["point"].split(" ")[0]].append(r)
    data = []
    for i, (point, points) in enumerate(sorted(per_point.items())):
        data.append({
            "type": "scattergl" if len(points) > 2000 else "scatter", "mode": "markers", "name": f"point {point}",
            "marker": {"color": PALETTE[i % len(PALETTE)], "size": 6, "opacity": 0.8},
            "x": [p["measured_per_token"] for p in points], "y": [p["ratio"] for p in points],
            "customdata": [[p["repo_id"], p["kind"], p["point"], p["cause"] or "within 0.5%"] for p in points],
            "hovertemplate": "%{customdata[0]} · %{customdata[1]}<br>%{customdata[2]}: ratio %{y:.4f}<br>%{customdata[3]}<extra></extra>",
        })  # fmt: skip
    band = lambda low, high, colour: {"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "y0": low, "y1": high,
                                      "fillcolor": colour, "opacity": 0.25, "line": {"width": 0}, "layer": "below"}  # fmt: skip
    layout = _layout("Priced over measured: every kind of every model at every point", height=560,
                     xaxis={"type": "log", "title": {"text": "measured, one layer (bytes/token)"}},
                     yaxis={"title": {"text": "priced / measured (ratio)"}},
                     shapes=[band(1 - tolerance, 1 + tolerance, "#9ecae1"), band(0.995, 1.005, "#31a354")],
                     annotations=[{"xref": "paper", "x": 1, "y": 1 + tolerance, "yanchor": "bottom", "xanchor": "right", "showarrow": False,
                                   "text": f"the records' tolerance ±{tolerance:.0%}"},
                                  {"xref": "paper", "x": 0, "y": 1.005, "yanchor": "bottom", "xanchor": "left", "showarrow": False,
                                   "text": "±0.5%: no cause named"}])  # fmt: skip
    return {"data": data, "layout": layout}


def changes(rows: list[dict]) -> dict:
    """What the last night changed: repos per kind of change, and per kind of layer the change of
    its priced and measured bytes per token (rows of the query changes)."""
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        if r["change"] != "bytes":
            counts[r["change"]] += 1
    moved = [r for r in rows if r["change"] == "bytes"]
    data = [{"type": "bar", "name": "repos", "x": list(counts), "y": list(counts.values()), "marker": {"color": PALETTE[0]},
             "hovertemplate": "%{x}: %{y} repos<extra></extra>"}]  # fmt: skip
    labels = [f"{r['repo_id']} · {r['kind']}" for r in moved]
    for i, (column, name) in enumerate((("priced_change_pct", "priced"), ("measured_change_pct", "measured"))):
        data.append({"type": "bar", "name": f"{name} bytes/token change", "x": labels, "y": [r[column] for r in moved],
                     "xaxis": "x2", "yaxis": "y2", "marker": {"color": PALETTE[i + 1]},
                     "hovertemplate": f"{name}: %{{y:+.2f}}%<extra>%{{x}}</extra>"})  # fmt: skip
    layout = _layout("What the last night changed", height=520, barmode="group",
                     xaxis={"domain": [0, 0.3], "title": {"text": "change"}}, yaxis={"title": {"text": "repos (count)"}},
                     xaxis2={"domain": [0.4, 1], "anchor": "y2", "title": {"text": "repo · kind"}},
                     yaxis2={"anchor": "x2", "title": {"text": "change of one layer's bytes/token (%)"}})  # fmt: skip
    return {"data": data, "layout": layout}


def per_token(row: dict) -> float:
    """Bytes per token of one layer, from a frontier row: kept_bytes over the setting's tokens."""
    return row["kept_bytes"] / (row["seq_length_tokens"] * row["micro_batch_count"])


def index_rows(cat: Catalogue) -> list[dict[str, Any]]:
    """The index: one row per (repo, kind) priced, one per repo with a spec but no price, one
    per refused repo; bytes per token of one layer at the default setting under no recompute,
    the best selective set (the frontier's fewest bytes kept) and full recompute, and whole-rank
    memory at the index's layout of each of its GPU counts, no recompute, the default length."""
    index = layouts()["index"]
    out = []
    for m in cat.models:
        repo = m["repo_id"]
        front = cat.frontier.get("transformers", {}).get(repo, [])
        whole = {}
        for g, lay in index.items():
            for r in cat.whole.get(repo, []):
                if (r["gpus_count"], r["tp_ranks"], r["pp_ranks"], r["dp_ranks"], int(r["zero_stage"])) == (g, lay["tp"], lay["pp"], lay["dp"], lay["zero"]):
                    whole[g] = r["total_bytes"]
        kinds: dict[str, list[dict]] = defaultdict(list)
        for r in front:
            kinds[r["kind"]].append(r)
        base = {"repo_id": repo, "family": m["model_type"], "params": m["params"], "layers": m["num_hidden_layers"],
                "status": "priced" if kinds else "spec, not priced", "reason": "", "whole": whole}  # fmt: skip
        if not kinds:
            out.append({**base, "kind": "", "kind_layers": None, "none": None, "best": None, "best_set": "", "full": None})
        for kind, rs in sorted(kinds.items()):
            selective = [r for r in rs if r["mask"] != FULL]
            best = min(selective, key=lambda r: (r["kept_bytes"], r["overhead_pct"]))
            # no recompute is mask 0, whose bytes every frontier row states as kept + saved
            # (mask 0 itself is off the frontier where a set saves bytes at no cost)
            none = (rs[0]["kept_bytes"] + rs[0]["saved_bytes"]) / (rs[0]["seq_length_tokens"] * rs[0]["micro_batch_count"])
            # full recompute, from planner_layer_prices (off the frontier where a selective set keeps as little for less)
            full = next((p["full_recompute_bytes"] for p in cat.parts.get(repo, []) if p["kind"] == kind), None)
            tokens = rs[0]["seq_length_tokens"] * rs[0]["micro_batch_count"]
            out.append({**base, "kind": kind, "kind_layers": rs[0]["layers_count"], "none": none, "best": per_token(best),
                        "best_set": best["switch_set"], "full": None if full is None else full / tokens})  # fmt: skip
    for f in cat.refusals:
        out.append({"repo_id": f["repo_id"], "family": "", "params": None, "layers": None, "status": f"refused at {f['stage']}",
                    "reason": f["reason"], "whole": {}, "kind": "", "kind_layers": None, "none": None, "best": None,
                    "best_set": "", "full": None})  # fmt: skip
    return out
