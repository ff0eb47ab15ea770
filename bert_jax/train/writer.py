"""Metrics out of the loop: TensorBoard event files (tensorboardX, no TensorFlow),
`metrics.jsonl` in the workdir, optionally Weights & Biases (train/wandb_run.py), and a
one-line progress report on stdout.

Names, the same in every sink: `train/*` (loss, the task's accuracies, learning_rate,
grad_norm, ...), `eval/*` (the task's evaluation metrics), `perf/*` (seq_per_sec,
tokens_per_sec, step_time_s, tflops_per_device, mfu). At the end of a run the flattened
config and the final metrics go to TensorBoard's hparams dashboard.

Only process 0 writes; every process may call. A resumed run calls `resume_at(step)`
first, so the steps it recomputes after its checkpoint are logged once, not twice.

A full disk: metrics.jsonl is the run's record, so a write to it that finds no space ends
the run with MetricsWriteError (one line: the directory, its free space, how to resume),
the records written before intact and no partial line left. TensorBoard's events are a
view of the same numbers: a failed event write (in tensorboardX's writer thread) turns
TensorBoard off for the run with one warning, never a thread traceback or a hang.
"""
from __future__ import annotations

import io
import json
import math
import os
import sys
import threading
import time

import jax
from absl import logging
from etils import epath

from bert_jax.runtime import paths


class MetricsWriteError(OSError):
  """metrics.jsonl could not be written for want of space; what it held is intact."""


def _space_error(e: OSError, workdir: str, what: str) -> MetricsWriteError:
  free = "" if paths.is_remote(workdir) else f" ({paths.free_space(workdir)})"
  reason = os.strerror(e.errno).lower() if e.errno else "no space left on device"
  return MetricsWriteError(
      e.errno, f"{what} failed: {reason} in {workdir}{free}. The records and checkpoints "
      "written before are intact; free space and run the same command again to resume.")


class _GuardedEvents:
  """tensorboardX's EventsWriter with its OSErrors kept instead of raised.

  Its writer thread calls write_event / flush: an error raised there (a full disk) would
  print the thread's traceback on stderr and end the thread, whose bounded queue would
  then never drain again (the next add_scalar would block the run). Kept, the first error
  ends the writing and the thread goes on draining the queue into nothing. close() is
  quiet too, so no buffered event is left to fail once more when the process exits."""

  def __init__(self, events):
    self._events = events
    self._lock = threading.Lock()  # the writer thread and close() on the main thread
    self.error = None
    self.closed = False

  def _call(self, method, *args):
    with self._lock:
      if self.error is None and not self.closed:
        try:
          method(*args)
        except OSError as e:
          self.error = e

  def write_event(self, event):
    self._call(self._events.write_event, event)

  def flush(self):
    self._call(self._events.flush)
    return True

  def close(self):
    with self._lock:
      if not self.closed:
        self.closed = True
        try:
          self._events.close()  # flushes; the file is closed even when that fails
        except (OSError, ValueError) as e:
          self.error = self.error or e


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
    self._event_file = None
    self._events = None  # the guarded tensorboardX EventsWriter
    self._jsonl = None
    if self.enabled:
      paths.resolve(workdir).mkdir(parents=True, exist_ok=True)
      self._jsonl_path = paths.resolve(workdir) / "metrics.jsonl"
      self._jsonl = self._open_jsonl()

  def _open_jsonl(self):
    if paths.is_remote(self.workdir):
      return _Rewritten(str(self._jsonl_path), append=True)
    # Unbuffered: each record is written (or fails) at once, so a full disk is seen at
    # its own record and no buffer is left to fail again when the file is closed.
    return open(self._jsonl_path, "ab", buffering=0)

  def _append(self, step: int, line: str) -> None:
    data = memoryview(line.encode("utf-8"))
    local = not paths.is_remote(self.workdir)
    start = os.fstat(self._jsonl.fileno()).st_size if local else None
    try:
      while data:
        written = self._jsonl.write(data)  # a full disk may take part of it first
        if not local or written is None:
          break
        data = data[written:]
      self._jsonl.flush()
    except OSError as e:
      if not paths.out_of_space(e):
        raise
      if local:
        try:
          os.truncate(self._jsonl_path, start)  # no partial line: the file ends at a record
        except OSError:
          pass
      self._close_tb_quietly()  # the run ends here: no event buffer left to fail at exit
      raise _space_error(e, self.workdir, f"writing step {step} to metrics.jsonl") from None

  @property
  def tb(self):
    """The TensorBoard writer, made at first use so resume_at can set its purge step."""
    if self._tb is None:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      _register_event_writers()
      self._tb = SummaryWriter(logdir=str(self.workdir), flush_secs=10, max_queue=1000,
                               purge_step=self._purge_step)
      # tensorboardX's EventFileWriter: its EventsWriter, behind the guard for the writer
      # thread and for close().
      self._event_file = self._tb._get_file_writer().event_writer
      ev = self._event_file
      self._events = _GuardedEvents(ev._ev_writer)  # pylint: disable=protected-access
      ev._ev_writer = ev._worker._record_writer = self._events  # pylint: disable=protected-access
    return self._tb

  def _tb_usable(self) -> bool:
    """False once an event write failed (a full disk), or tensorboardX's writer thread
    died otherwise: its bounded queue would never drain again, so further writes would
    block the run. One warning; metrics.jsonl keeps every record either way."""
    if self._tb_dead:
      return False
    try:
      self.tb  # pylint: disable=pointless-statement
    except OSError as e:  # no room for the event file itself
      return self._tb_stopped(e)
    if self._events.error is not None:
      return self._tb_stopped(self._events.error)
    if not self._worker_alive():
      return self._tb_stopped("its writer thread ended")
    return True

  def _worker_alive(self) -> bool:
    worker = getattr(self._event_file, "_worker", None)  # None once closed
    return worker is not None and worker.is_alive()

  def _tb_stopped(self, why) -> bool:
    self._tb_dead = True
    logging.warning("TensorBoard's event writer in %s stopped after a failed write (%s): no "
                    "more TensorBoard events this run; metrics.jsonl keeps every record.",
                    self.workdir, why)
    self._close_tb_quietly()
    return False

  def _close_tb_quietly(self) -> None:
    """Stops tensorboardX's thread (it drains its queue into the guard) and closes the event
    file, whose failures the guard keeps: nothing is left to fail at exit. A thread that
    died otherwise cannot drain the queue, so only the file is closed then."""
    if self._events is None or self._events.closed:
      return
    if self._worker_alive():
      self._tb.close()
    self._events.close()

  def resume_at(self, step: int) -> None:
    """The run continues after `step` (its checkpoint): records of later steps, which an
    interrupted run wrote before it was killed and this run recomputes, are dropped from
    metrics.jsonl (rewritten to a temporary file, then renamed over it) and hidden in
    TensorBoard (a purge step), so each step appears once. A line cut by the kill is
    dropped too. At step 0 (nothing restored: the workdir's checkpoints are gone, so its
    metrics belong to an earlier run) the old file is kept whole beside it, as
    metrics.<time>.jsonl, not emptied."""
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
    try:  # a reader sees the old file or the new one (one upload on an object store)
      old = path.read_bytes() if step == 0 and path.exists() else b""
      if old.strip():
        kept = []  # all of it is the earlier run's (its step-0 lines too)
        aside = path.parent / f"metrics.{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
        paths.write_atomically(aside, old)
        log(f"{path} held an earlier run's metrics and no checkpoint to resume: kept as "
            f"{aside}")
      paths.write_atomically(path, "".join(kept))
    except OSError as e:
      if not paths.out_of_space(e):
        raise
      raise _space_error(e, self.workdir, "rewriting metrics.jsonl for the resumed "
                         "run") from None
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
    self._append(step, json.dumps({"step": int(step), "time": time.time(), **record}) + "\n")
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
        self._tb.close()  # its last flush may fail too: the guard keeps it
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
