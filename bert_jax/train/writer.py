"""Metrics out of the loop: TensorBoard event files (tensorboardX, no TensorFlow),
`metrics.jsonl` in the workdir, optionally Weights & Biases (train/wandb_run.py), and a
one-line progress report on stdout.

Names, the same in every sink: `train/*` (loss, the task's accuracies, learning_rate,
grad_norm, ...), `eval/*` (the task's evaluation metrics), `perf/*` (seq_per_sec,
tokens_per_sec, step_time_s, tflops_per_device, mfu). At the end of a run the flattened
config and the final metrics go to TensorBoard's hparams dashboard.

Only process 0 writes; every process may call. A resumed run calls `resume_at(step)`
first, so the steps it recomputes after its checkpoint are logged once, not twice.
"""
from __future__ import annotations

import io
import json
import math
import os
import sys
import time

import jax
from absl import logging
from etils import epath

from bert_jax import paths


class _Rewritten:
  """A file on an object store, which has no appends: every flush rewrites the object
  with all bytes written so far (metric files are small). Opened for appending, it
  starts from the object's current content, so a resumed run keeps its history."""

  def __init__(self, path: str, append: bool = False):
    self.path = epath.Path(path)
    self._buf = io.BytesIO()
    if append and self.path.exists():
      self._buf.write(self.path.read_bytes())

  def write(self, data) -> None:
    self._buf.write(data.encode("utf-8") if isinstance(data, str) else data)

  def flush(self) -> None:
    self.path.write_bytes(self._buf.getvalue())

  def close(self) -> None:
    self.flush()


class _RewrittenFactory:
  """tensorboardX writer factory for gs:// event files, through epath (gcsfs)."""

  def open(self, path):
    return _Rewritten(path)

  def directory_check(self, path):
    del path  # object stores have no directories to create


def _register_event_writers() -> None:
  # tensorboardX's own gs:// writer needs google-cloud-storage's default credentials;
  # ours goes through the same client as every other gs:// path.
  from tensorboardX import record_writer  # pylint: disable=g-import-not-at-top
  record_writer.register_writer_factory("gs", _RewrittenFactory())


class MetricWriter:
  """write_scalars(step, {name: value}) to TensorBoard + metrics.jsonl (process 0 only)."""

  def __init__(self, workdir: str, enabled: bool | None = None, wandb_run=None):
    self.enabled = jax.process_index() == 0 if enabled is None else enabled
    self.workdir = workdir
    self.wandb = wandb_run if self.enabled else None  # a train/wandb_run.WandbRun or None
    self._tb = None
    self._purge_step = None
    self._tb_dead = False
    self._jsonl = None
    if self.enabled:
      paths.resolve(workdir).mkdir(parents=True, exist_ok=True)
      self._jsonl_path = paths.resolve(workdir) / "metrics.jsonl"
      self._jsonl = self._open_jsonl()

  def _open_jsonl(self):
    if paths.is_remote(self.workdir):
      return _Rewritten(str(self._jsonl_path), append=True)
    return open(self._jsonl_path, "a", encoding="utf-8")

  @property
  def tb(self):
    """The TensorBoard writer, made at first use so resume_at can set its purge step."""
    if self._tb is None:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      _register_event_writers()
      self._tb = SummaryWriter(logdir=str(self.workdir), flush_secs=10, max_queue=1000,
                               purge_step=self._purge_step)
    return self._tb

  def _tb_usable(self) -> bool:
    """False once tensorboardX's writer thread has died. It writes the events from a
    thread; when a write fails there (a full disk) the thread ends and its bounded queue is
    never drained again, so further writes would block the run forever instead of letting
    it stop with a clear error. metrics.jsonl keeps every record either way."""
    if self._tb_dead:
      return False
    writer = getattr(self.tb._get_file_writer(), "event_writer", None)  # pylint: disable=protected-access
    worker = getattr(writer, "_worker", None)
    if worker is not None and not worker.is_alive():
      self._tb_dead = True
      logging.warning("TensorBoard's event writer in %s stopped after a failed write (a full "
                      "disk?): no more TensorBoard events this run; metrics.jsonl keeps every "
                      "record.", self.workdir)
      return False
    return True

  def resume_at(self, step: int) -> None:
    """The run continues after `step` (its checkpoint): records of later steps, which an
    interrupted run wrote before it was killed and this run recomputes, are dropped from
    metrics.jsonl (rewritten to a temporary file, then renamed over it) and hidden in
    TensorBoard (a purge step), so each step appears once. A line cut by the kill is
    dropped too."""
    if not self.enabled:
      return
    self._purge_step = int(step) + 1
    if self._tb is not None:
      raise RuntimeError("MetricWriter.resume_at must come before the first write.")
    self._jsonl.close()
    path = self._jsonl_path
    kept = []
    if path.exists():
      for line in path.read_text(encoding="utf-8").splitlines():
        try:
          if int(json.loads(line)["step"]) <= step:
            kept.append(line + "\n")
        except (ValueError, KeyError, TypeError):
          pass  # a partial last line: the write the kill interrupted
    if paths.is_remote(self.workdir):
      # One upload replaces an object whole (never a torn file); epath's fsspec rename
      # would refuse to overwrite it anyway.
      path.write_text("".join(kept), encoding="utf-8")
    else:
      tmp = path.parent / (path.name + ".tmp")
      tmp.write_text("".join(kept), encoding="utf-8")
      os.replace(tmp, path)
    self._jsonl = self._open_jsonl()

  def write_scalars(self, step: int, scalars: dict) -> None:
    """A non-finite value (no evaluation words in a toy corpus: a NaN Spearman) goes to
    metrics.jsonl as "n/a" and not to TensorBoard, which would warn on it."""
    if not self.enabled:
      return
    clean = {k: float(v) for k, v in scalars.items()}
    if self._tb_usable():
      for k, v in clean.items():
        if math.isfinite(v):
          self.tb.add_scalar(k, v, step)
    record = {k: v if math.isfinite(v) else "n/a" for k, v in clean.items()}
    self._jsonl.write(json.dumps({"step": int(step), "time": time.time(), **record}) + "\n")
    self._jsonl.flush()
    if self.wandb is not None:
      self.wandb.log(step, {k: v for k, v in clean.items() if math.isfinite(v)})

  def write_hparams(self, config: dict, final_metrics: dict) -> None:
    """The run's flattened config (`train.learning_rate`: numbers, strings, booleans;
    lists as their text) and its final metrics, to TensorBoard's hparams dashboard.

    Written into this run's event file (tensorboardX's add_hparams would start a new run
    in a subdirectory): the dashboard reads each metric's value from this run's scalars
    of the same tag, which the loop logged."""
    if not self.enabled:
      return
    from tensorboardX import summary  # pylint: disable=g-import-not-at-top
    hparams = flatten_config(config)
    metrics = {k: float(v) for k, v in final_metrics.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)
               and math.isfinite(float(v))}
    if self._tb_usable():
      file_writer = self.tb._get_file_writer()  # pylint: disable=protected-access
      for proto in summary.hparams(hparams, metrics):
        file_writer.add_summary(proto)
    if self.wandb is not None:
      self.wandb.summary(metrics)

  def write_text(self, tag: str, text: str, step: int = 0) -> None:
    if self.enabled and self._tb_usable():
      self.tb.add_text(tag, text, step)

  def close(self) -> None:
    if self.enabled:
      if self._tb is not None and self._tb_usable():
        self._tb.close()
      self._jsonl.close()
      if self.wandb is not None:
        self.wandb.finish()


def flatten_config(tree: dict, prefix: str = "") -> dict:
  """{"train": {"learning_rate": 1e-4}} -> {"train.learning_rate": 1e-4}: numbers, strings
  and booleans as they are, anything else (tuples, None) as its text."""
  out = {}
  for k, v in tree.items():
    name = f"{prefix}{k}"
    if isinstance(v, dict):
      out.update(flatten_config(v, name + "."))
    elif isinstance(v, (bool, int, float, str)):
      out[name] = v
    else:
      out[name] = str(v)
  return out


# Per-class metrics `precision/<class>` etc.: the table's columns, in order.
_PER_CLASS = ("precision", "recall", "f1", "support")


def eval_report(step: int, metrics: dict) -> str:
  """`eval @ 40: accuracy 0.8125 | macro_f1 0.7900` and, when there are per-class scores
  (`precision/<class>`, `recall/<class>`, `f1/<class>`, `support/<class>`), an aligned
  table below it with one row per class (absent cells blank)."""
  headline = {k: v for k, v in metrics.items() if k.split("/", 1)[0] not in _PER_CLASS
              or "/" not in k}
  classes: dict[str, dict] = {}
  for k, v in metrics.items():
    head, _, cls = k.partition("/")
    if head in _PER_CLASS and cls:
      classes.setdefault(cls, {})[head] = v
  line = f"eval @ {step}: " + " | ".join(f"{k} {v:.4f}" for k, v in headline.items())
  if not classes:
    return line
  columns = [c for c in _PER_CLASS if any(c in row for row in classes.values())]
  width = max(5, *(len(c) for c in classes))
  rows = [f"  {'class':<{width}}" + "".join(f" {c:>9}" for c in columns)]
  for cls, row in classes.items():
    cells = "".join(
        f" {'':>9}" if c not in row else
        f" {int(row[c]):>9d}" if c == "support" else f" {row[c]:>9.4f}" for c in columns)
    rows.append(f"  {cls:<{width}}" + cells)
  return "\n".join([line] + rows)


def progress_line(step: int, total: int, scalars: dict, eta_seconds: float | None,
                  labels: tuple[tuple[str, str], ...] = ()) -> str:
  """`step 120/2000 | loss 6.12 | mlm_acc 0.081 | ... | seq/s 1520 | ETA 3m05s`.

  scalars: the logged names (`train/loss`, `perf/mfu`, ...). labels: the task's (train
  metric without its `train/` prefix, short label) pairs, shown after the loss.
  """
  show = ([("train/loss", "loss", "{:.4f}")]
          + [(f"train/{k}", label, "{:.3f}") for k, label in labels]
          + [("train/learning_rate", "lr", "{:.2e}"), ("train/grad_norm", "gnorm", "{:.2f}"),
             ("perf/seq_per_sec", "seq/s", "{:.0f}"), ("perf/mfu", "mfu", "{:.1%}")])
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
