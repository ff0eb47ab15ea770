"""`visualize curves`: learning curves from one or more workdirs' metrics.jsonl.

One panel per metric; train values (`train/loss`) as lines, eval values (`eval/loss`)
as markers in the same colour; every run (workdir) has its own colour. `--metrics loss`
names both; a run logged before the `train/` prefix (bare `loss`) is read too, and a
full name (`perf/mfu`) is plotted as it is.
"""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from bert_jax.inference.loader import InputError
from bert_jax.visualize import plot


def read_metrics(workdir: str) -> list[dict]:
  """The rows of workdir/metrics.jsonl (a resumed run appends; later rows win per step)."""
  path = os.path.join(workdir, "metrics.jsonl") if os.path.isdir(workdir) else workdir
  if not os.path.isfile(path):
    raise InputError(f"--workdir {workdir} has no metrics.jsonl")
  rows = []
  with open(path, encoding="utf-8") as f:
    for n, line in enumerate(f, 1):
      if line.strip():
        try:
          rows.append(json.loads(line))
        except json.JSONDecodeError:
          raise InputError(f"{path} line {n} is not JSON") from None
  return rows


def series(rows: Sequence[dict], name: str) -> tuple[np.ndarray, np.ndarray]:
  """(steps, values) of one metric, by step (the last value written for a step)."""
  by_step = {int(r["step"]): float(r[name]) for r in rows if name in r and "step" in r}
  steps = np.array(sorted(by_step), dtype=np.int64)
  return steps, np.array([by_step[s] for s in steps], dtype=np.float64)


def train_series(rows: Sequence[dict], metric: str) -> tuple[np.ndarray, np.ndarray]:
  """(steps, values) of `train/<metric>`, else of `<metric>` as logged."""
  steps, values = series(rows, f"train/{metric}")
  return (steps, values) if len(steps) else series(rows, metric)


def draw(runs: dict[str, list[dict]], metrics: Sequence[str], path: str) -> str:
  fig, axes = plot.subplots(1, len(metrics), 4.6 * len(metrics), 3.6)
  for ax, metric in zip(axes[0], metrics):
    for color, (label, rows) in enumerate(runs.items()):
      c = f"C{color % 10}"
      steps, values = train_series(rows, metric)
      if len(steps):
        ax.plot(steps, values, color=c, label=f"{label} train")
      steps, values = series(rows, f"eval/{metric}")
      if len(steps):
        ax.plot(steps, values, "o--", color=c, label=f"{label} eval")
    ax.set_title(metric, fontsize=10)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  fig.tight_layout()
  return plot.save(fig, path)


def run(args) -> int:
  metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
  if not metrics:
    raise InputError("--metrics is empty")
  runs = {}
  for w in args.workdir:
    label = os.path.basename(os.path.normpath(w))
    runs[label if label not in runs else w] = read_metrics(w)
  for metric in metrics:
    if not any(name in r for rows in runs.values() for r in rows
               for name in (f"train/{metric}", metric, f"eval/{metric}")):
      known = sorted({k for rows in runs.values() for r in rows for k in r} - {"step", "time"})
      raise InputError(f"--metrics {metric}: no run logged it (logged: {', '.join(known)})")
  for label, rows in runs.items():
    for metric in metrics:
      steps, values = train_series(rows, metric)
      e_steps, e_values = series(rows, f"eval/{metric}")
      parts = [f"train {values[0]:.4f} -> {values[-1]:.4f} (steps {steps[0]}..{steps[-1]})"
               if len(steps) else "", f"eval last {e_values[-1]:.4f} @ {e_steps[-1]}"
               if len(e_steps) else ""]
      print(f"{label} {metric}: " + "; ".join(p for p in parts if p))
  print(f"wrote {draw(runs, metrics, args.output)}")
  return 0
