"""Metrics out of the loop: TensorBoard event files (tensorboardX, no TensorFlow),
`metrics.jsonl` in the workdir, and a one-line progress report on stdout.

Only process 0 writes; every process may call.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

import jax


class MetricWriter:
  """write_scalars(step, {name: value}) to TensorBoard + metrics.jsonl (process 0 only)."""

  def __init__(self, workdir: str, enabled: bool | None = None):
    self.enabled = jax.process_index() == 0 if enabled is None else enabled
    self._tb = None
    self._jsonl = None
    if self.enabled:
      os.makedirs(workdir, exist_ok=True)
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      self._tb = SummaryWriter(logdir=workdir, flush_secs=10)
      self._jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a", encoding="utf-8")

  def write_scalars(self, step: int, scalars: dict) -> None:
    """A non-finite value (no evaluation words in a toy corpus: a NaN Spearman) goes to
    metrics.jsonl as "n/a" and not to TensorBoard, which would warn on it."""
    if not self.enabled:
      return
    clean = {k: float(v) for k, v in scalars.items()}
    for k, v in clean.items():
      if math.isfinite(v):
        self._tb.add_scalar(k, v, step)
    record = {k: v if math.isfinite(v) else "n/a" for k, v in clean.items()}
    self._jsonl.write(json.dumps({"step": int(step), "time": time.time(), **record}) + "\n")
    self._jsonl.flush()

  def write_text(self, tag: str, text: str, step: int = 0) -> None:
    if self.enabled:
      self._tb.add_text(tag, text, step)

  def close(self) -> None:
    if self.enabled:
      self._tb.close()
      self._jsonl.close()


def progress_line(step: int, total: int, scalars: dict, eta_seconds: float | None,
                  labels: tuple[tuple[str, str], ...] = ()) -> str:
  """`step 120/2000 | loss 6.12 | mlm_acc 0.081 | ... | 1520 seq/s | ETA 3m05s`.

  labels: the task's (metric, short label) pairs, shown after the loss (3 decimals).
  """
  show = ([("loss", "loss", "{:.4f}")] + [(k, label, "{:.3f}") for k, label in labels]
          + [("learning_rate", "lr", "{:.2e}"), ("grad_norm", "gnorm", "{:.2f}"),
             ("seq_per_sec", "seq/s", "{:.0f}"), ("mfu", "mfu", "{:.1%}")])
  parts = [f"step {step}/{total}"]
  parts += [f"{label} {fmt.format(scalars[k])}" for k, label, fmt in show if k in scalars]
  if eta_seconds is not None:
    m, s = divmod(int(eta_seconds), 60)
    h, m = divmod(m, 60)
    parts.append(f"ETA {h}h{m:02d}m" if h else f"ETA {m}m{s:02d}s")
  return " | ".join(parts)


def log(msg: str) -> None:
  if jax.process_index() == 0:
    print(msg, file=sys.stdout, flush=True)
