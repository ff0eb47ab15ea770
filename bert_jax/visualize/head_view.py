"""A self-contained HTML head view: one file, inline JS/CSS/data, no network.

Tokens in two columns, a line from query token i to key token j for each head with opacity
= weight (heads in distinct colours, as in bertviz's head view); pick a layer, toggle heads,
hover a token to see only its row. Below, the selected head's matrix with its numbers.
"""
from __future__ import annotations

import html
import json
import os
from typing import Sequence

import numpy as np

_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>%(title)s</title>
<style>
body{font:13px sans-serif;margin:12px;background:#fff;color:#222}
#heads span{display:inline-block;width:22px;height:14px;margin:1px;cursor:pointer;
  border:2px solid #fff;text-align:center;color:#fff;font-size:10px}
#heads span.off{opacity:.2}
canvas{border:1px solid #ddd;margin-top:6px}
table{border-collapse:collapse;margin-top:8px}td,th{padding:1px 4px;font-size:11px}
</style></head><body>
<h3>%(title)s</h3>
<label>Layer <select id="layer"></select></label>
<span id="heads"></span>
<div><canvas id="view"></canvas></div>
<div id="matrix"></div>
<script>
const DATA = %(data)s;
const COLORS = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2",
  "#7f7f7f","#bcbd22","#17becf","#393b79","#637939","#8c6d31","#843c39","#7b4173","#3182bd"];
const L = DATA.weights.length, H = DATA.weights[0].length;
let layer = 0, active = new Array(H).fill(true), focus = -1, shown = 0;
const sel = document.getElementById("layer");
for (let l = 0; l < L; l++) sel.add(new Option(String(l), String(l)));
sel.onchange = () => { layer = +sel.value; draw(); };
const heads = document.getElementById("heads");
for (let h = 0; h < H; h++) {
  const s = document.createElement("span");
  s.textContent = h; s.style.background = COLORS[h %% COLORS.length];
  s.onclick = () => { active[h] = !active[h]; shown = h; s.classList.toggle("off"); draw(); };
  heads.appendChild(s);
}
const cv = document.getElementById("view"), ctx = cv.getContext("2d");
const ROW = 20, X0 = 150, X1 = 450;
cv.width = 600; cv.height = ROW * Math.max(DATA.rows.length, DATA.cols.length) + 20;
cv.onmousemove = e => {
  const r = cv.getBoundingClientRect(), y = e.clientY - r.top, x = e.clientX - r.left;
  const i = Math.floor((y - 10) / ROW);
  const f = (x < X0 + 20 && i >= 0 && i < DATA.rows.length) ? i : -1;
  if (f !== focus) { focus = f; draw(); }
};
function draw() {
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, cv.width, cv.height);
  ctx.font = "13px sans-serif"; ctx.textBaseline = "middle";
  const w = DATA.weights[layer];
  for (let h = 0; h < H; h++) {
    if (!active[h]) continue;
    ctx.strokeStyle = COLORS[h %% COLORS.length];
    for (let i = 0; i < DATA.rows.length; i++) {
      if (focus >= 0 && i !== focus) continue;
      for (let j = 0; j < DATA.cols.length; j++) {
        ctx.globalAlpha = Math.min(1, w[h][i][j]); ctx.lineWidth = 2;
        ctx.beginPath(); ctx.moveTo(X0 + 5, 20 + i * ROW); ctx.lineTo(X1 - 5, 20 + j * ROW);
        ctx.stroke();
      }
    }
  }
  ctx.globalAlpha = 1; ctx.fillStyle = "#222";
  ctx.textAlign = "right";
  DATA.rows.forEach((t, i) => ctx.fillText(t, X0, 20 + i * ROW));
  ctx.textAlign = "left";
  DATA.cols.forEach((t, j) => ctx.fillText(t, X1, 20 + j * ROW));
  matrix(w[shown]);
}
function matrix(m) {
  let s = "<b>layer " + layer + ", head " + shown + "</b> (rows: queries, columns: keys)" +
      "<table><tr><th></th>" + DATA.cols.map(c => "<th>" + esc(c) + "</th>").join("") + "</tr>";
  m.forEach((row, i) => {
    s += "<tr><th>" + esc(DATA.rows[i]) + "</th>" + row.map(v =>
      "<td style='background:rgba(31,119,180," + v.toFixed(2) + ")'>" + v.toFixed(2) + "</td>"
    ).join("") + "</tr>";
  });
  document.getElementById("matrix").innerHTML = s + "</table>";
}
function esc(t) { return t.replace(/&/g, "&amp;").replace(/</g, "&lt;"); }
draw();
</script></body></html>
"""


def render(weights: np.ndarray, rows: Sequence[str], cols: Sequence[str], title: str) -> str:
  """weights [layers, heads, q, kv] -> the page as a string (weights rounded to 1e-3)."""
  weights = np.asarray(weights, np.float64)
  if weights.ndim != 4 or weights.shape[2:] != (len(rows), len(cols)):
    raise ValueError(f"weights {weights.shape} do not fit {len(rows)} x {len(cols)} tokens")
  data = {"rows": list(rows), "cols": list(cols),
          "weights": np.round(weights, 3).tolist()}
  # "</" inside the inline JSON could end the <script> element early.
  payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
  return _PAGE % {"title": html.escape(title), "data": payload}


def write(path: str, weights: np.ndarray, rows: Sequence[str], cols: Sequence[str],
          title: str = "attention heads") -> str:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(render(weights, rows, cols, title))
  return path
