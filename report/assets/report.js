// The report's pages: draw every figure embedded as JSON, sort and filter tables, and the
// compare page's chosen models. Plotly comes from plotly.min.js beside this file: no network.
"use strict";

function drawFigures() {
  for (const holder of document.querySelectorAll("script[type='application/json'][data-figure]")) {
    const figure = JSON.parse(holder.textContent);
    const div = document.getElementById(holder.dataset.figure);
    Plotly.newPlot(div, figure.data, figure.layout, {displaylogo: false, responsive: true});
  }
}

function sortable(table) {
  const body = table.tBodies[0];
  table.querySelectorAll("th[data-sort]").forEach((th, column) => {
    th.addEventListener("click", () => {
      const numeric = th.dataset.sort === "num";
      const down = th.dataset.dir !== "down";
      th.dataset.dir = down ? "down" : "up";
      const key = (row) => {
        const cell = row.cells[column];
        const value = cell.dataset.value !== undefined ? cell.dataset.value : cell.textContent;
        return numeric ? (value === "" ? -Infinity : Number(value)) : value.toLowerCase();
      };
      const rows = Array.from(body.rows);
      rows.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0) * (down ? -1 : 1));
      rows.forEach((row) => body.appendChild(row));
    });
  });
}

function filterable(input, table) {
  input.addEventListener("input", () => {
    const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    for (const row of table.tBodies[0].rows) {
      const text = row.textContent.toLowerCase();
      row.hidden = !words.every((w) => text.includes(w));
    }
  });
}

// Compare: whole layer stack per rank against sequence length, under no recompute and full
// recompute, for up to six models chosen in the picker, on the same axes.
const COMPARE_LIMIT = 6;
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];

function compareFigure(data, chosen, title) {
  const traces = [];
  chosen.forEach((repo, i) => {
    for (const [set, dash] of [["none", "solid"], ["full", "dot"]]) {
      const points = data[repo][set] || [];
      traces.push({
        type: "scatter", mode: "lines+markers", name: `${repo} · ${set}`,
        x: points.map((p) => p[0]), y: points.map((p) => p[1] / 2 ** 30),
        line: {color: PALETTE[i % PALETTE.length], dash: dash},
        meta: {repo: repo, switch_set: set},
        hovertemplate: `<b>${repo}</b> · ${set}<br>seq %{x}<br>%{y:.2f} GiB<extra></extra>`,
      });
    }
  });
  const layout = {
    title: {text: title}, height: 560, font: {family: "system-ui, sans-serif", size: 12},
    xaxis: {type: "log", title: {text: "sequence length (tokens)"}},
    yaxis: {type: "log", title: {text: "layer stack per rank (GiB)"}},
    legend: {orientation: "h", y: -0.2},
  };
  return {data: traces, layout: layout};
}

function setUpCompare() {
  const holder = document.getElementById("compare-data");
  if (!holder) return;
  const spec = JSON.parse(holder.textContent);
  const boxes = Array.from(document.querySelectorAll(".picker input[type=checkbox]"));
  const draw = () => {
    const chosen = boxes.filter((b) => b.checked).map((b) => b.value);
    boxes.forEach((b) => { b.disabled = !b.checked && chosen.length >= COMPARE_LIMIT; });
    const figure = compareFigure(spec.models, chosen, spec.title);
    Plotly.react(document.getElementById("compare"), figure.data, figure.layout, {displaylogo: false, responsive: true});
  };
  boxes.forEach((b) => b.addEventListener("change", draw));
  draw();
}

document.addEventListener("DOMContentLoaded", () => {
  drawFigures();
  document.querySelectorAll("table.sortable").forEach(sortable);
  document.querySelectorAll("input[data-filter]").forEach((input) => filterable(input, document.getElementById(input.dataset.filter)));
  setUpCompare();
});
