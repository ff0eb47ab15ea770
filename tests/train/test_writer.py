"""train/writer.py: what reaches TensorBoard and metrics.jsonl."""
import errno
import json
import logging
import math
import os
import re
import subprocess
import time

import pytest

from bert_jax.train.writer import (MetricWriter, MetricsWriteError, eval_report,
                                   flatten_config, progress_line)


def test_non_finite_scalars_are_n_a_in_jsonl_and_absent_from_tensorboard(tmp_path, caplog):
  """A toy corpus without evaluation words gives NaN scores: no tensorboardX warning."""
  writer = MetricWriter(str(tmp_path), enabled=True)
  added = []
  add = writer.tb.add_scalar
  writer.tb.add_scalar = lambda k, v, step: (added.append(k), add(k, v, step))
  with caplog.at_level(logging.WARNING):
    writer.write_scalars(3, {"train/loss": 0.5, "eval/wordsim353": math.nan,
                             "eval/analogy": math.inf})
  writer.close()
  assert added == ["train/loss"]
  assert not [r for r in caplog.records if "NaN or Inf" in r.getMessage()]
  (line,) = open(tmp_path / "metrics.jsonl").read().splitlines()
  record = json.loads(line)  # strict JSON: no bare NaN / Infinity
  assert record["train/loss"] == 0.5
  assert record["eval/wordsim353"] == "n/a" and record["eval/analogy"] == "n/a"
  assert "NaN" not in line and "Infinity" not in line


def test_progress_line_shows_the_task_labels():
  line = progress_line(120, 2000, {"train/loss": 6.1234, "train/mlm_accuracy": 0.0812,
                                  "perf/mfu": 0.25, "perf/seq_per_sec": 1520.4},
                       65.0, labels=(("mlm_accuracy", "mlm_acc"),))
  assert line == ("step 120/2000 | loss 6.1234 | mlm_acc 0.081 | seq/s 1520 | mfu 25.0% "
                  "| ETA 1m05s")


def test_eval_report_headline_then_a_per_class_table():
  """All 14 classes' scores once fit on one ~2,500-character line; now the headline stays
  on the step line and the classes are rows of an aligned table."""
  metrics = {"accuracy": 0.75, "macro_f1": 0.5,
             "precision/neg": 1.0, "recall/neg": 0.5, "f1/neg": 2 / 3, "support/neg": 4,
             "precision/positive": 0.6, "recall/positive": 1.0, "f1/positive": 0.75,
             "support/positive": 3}
  assert eval_report(40, metrics).splitlines() == [
      "eval @ 40: accuracy 0.7500 | macro_f1 0.5000",
      "  class    precision    recall        f1   support",
      "  neg         1.0000    0.5000    0.6667         4",
      "  positive    0.6000    1.0000    0.7500         3"]
  # NER's micro scores are headline metrics; a type with only some columns leaves blanks.
  ner = eval_report(7, {"precision": 0.8, "f1": 0.5, "f1/PER": 1.0, "recall/LOC": 0.0})
  assert ner.splitlines() == ["eval @ 7: precision 0.8000 | f1 0.5000",
                              "  class    recall        f1",
                              "  PER                1.0000",
                              "  LOC      0.0000          "]
  assert eval_report(2, {"mlm_loss": 6.5}) == "eval @ 2: mlm_loss 6.5000"


def test_flatten_config_keeps_scalars_and_writes_the_rest_as_text():
  flat = flatten_config({"seed": 0, "train": {"learning_rate": 1e-4, "phases": ({"a": 1},),
                                              "async": True, "opt": {"name": "adamw"}},
                         "mesh_shape": (-1, 1, 1), "vocab_path": None})
  assert flat == {"seed": 0, "train.learning_rate": 1e-4, "train.phases": "({'a': 1},)",
                  "train.async": True, "train.opt.name": "adamw", "mesh_shape": "(-1, 1, 1)",
                  "vocab_path": "None"}


def _events(path):
  """Event protos of a TensorBoard file (TFRecord framing: length, crc, data, crc)."""
  import struct  # pylint: disable=g-import-not-at-top
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  data, out, at = open(path, "rb").read(), [], 0
  while at < len(data):
    (n,) = struct.unpack("<Q", data[at:at + 8])
    event = event_pb2.Event()
    event.ParseFromString(data[at + 12:at + 12 + n])
    out.append(event)
    at += 12 + n + 4
  return out


def test_a_restart_from_step_0_keeps_the_earlier_runs_metrics_beside(tmp_path):
  """No checkpoint to resume (they were deleted): the old metrics.jsonl is another run's,
  kept whole as metrics.<time>.jsonl; the new run's file starts empty."""
  first = MetricWriter(str(tmp_path), enabled=True)
  for step in range(1, 4):
    first.write_scalars(step, {"loss": float(step)})
  first.close()
  before = (tmp_path / "metrics.jsonl").read_bytes()
  rerun = MetricWriter(str(tmp_path), enabled=True)
  rerun.resume_at(0)
  rerun.close()
  (aside,) = tmp_path.glob("metrics.2*.jsonl")
  assert aside.read_bytes() == before and (tmp_path / "metrics.jsonl").read_bytes() == b""


def test_resume_at_logs_every_step_once(tmp_path):
  """A run killed at step 5 after its checkpoint at 3: the rerun drops 4, 5 (and the line
  the kill cut) from metrics.jsonl and tells TensorBoard to purge steps >= 4."""
  first = MetricWriter(str(tmp_path), enabled=True)
  for step in range(1, 6):
    first.write_scalars(step, {"loss": float(step)})
  first.close()
  with open(tmp_path / "metrics.jsonl", "a") as f:
    f.write('{"step": 6, "lo')
  before = set(tmp_path.glob("events.out.tfevents*"))
  time.sleep(1.1)  # event files are named by the second: the rerun's must be a new one
  rerun = MetricWriter(str(tmp_path), enabled=True)
  rerun.resume_at(3)
  for step in (4, 5):
    rerun.write_scalars(step, {"loss": step + 0.5})
  rerun.close()
  rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl").read().splitlines()]
  assert [(r["step"], r["loss"]) for r in rows] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.5),
                                                    (5, 5.5)]
  (new,) = set(tmp_path.glob("events.out.tfevents*")) - before
  starts = [e.step for e in _events(new) if e.HasField("session_log")]
  assert starts == [4]  # SessionLog.START at 4: TensorBoard hides older events >= 4


class _FullDisk:
  """A file on a disk with `room` bytes left: a write takes what fits, then a write that
  finds nothing left raises ENOSPC, as a file on a full disk does."""

  def __init__(self, f, room: int):
    self._f, self.room = f, room

  def write(self, data):
    if self.room <= 0:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    n = min(len(data), self.room)
    self.room -= n
    return self._f.write(data[:n])

  def flush(self):
    if self.room <= 0:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return self._f.flush()

  def __getattr__(self, name):
    return getattr(self._f, name)


def _quiet(stderr: str) -> None:
  assert "Traceback" not in stderr and "Exception in thread" not in stderr, stderr
  assert "Exception ignored" not in stderr, stderr


def test_a_full_disk_under_tensorboard_never_blocks_nor_prints_a_thread_traceback(
    tmp_path, caplog, capfd):
  """tensorboardX writes events from a thread with a bounded queue. A failed write there
  (a full disk) must not print the thread's traceback, nor leave the queue undrained
  (later writes would block): TensorBoard stops with one warning, metrics.jsonl keeps
  every record, close() returns."""
  w = MetricWriter(str(tmp_path), enabled=True)
  w.write_scalars(1, {"train/loss": 1.0})
  events = w._events._events._py_recordio_writer  # pylint: disable=protected-access
  events._writer = _FullDisk(events._writer, room=0)  # pylint: disable=protected-access
  w.write_scalars(2, {"train/loss": 2.0})
  deadline = time.monotonic() + 30
  while w._events.error is None and time.monotonic() < deadline:  # the thread's write failed
    time.sleep(0.05)
  assert w._events.error.errno == errno.ENOSPC  # pylint: disable=protected-access
  with caplog.at_level(logging.WARNING):
    for step in range(3, 3 + 300):  # 300 x 12 events: far more than the queue holds
      w.write_scalars(step, {f"perf/m{i}": float(i) for i in range(12)})
    w.write_text("note", "after the failure")
    w.close()
  assert caplog.text.count("event writer") == 1 and "stopped after a failed write" in caplog.text
  assert "No space left on device" in caplog.text
  rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
  assert [r["step"] for r in rows] == list(range(1, 303))
  _quiet(capfd.readouterr().err)


def test_a_dead_tensorboard_thread_never_blocks_the_run(tmp_path, caplog):
  """The writer thread ended by anything else (not an OSError the guard keeps): its queue
  is never drained again, so TensorBoard stops instead of blocking the run."""
  w = MetricWriter(str(tmp_path), enabled=True)
  w.write_scalars(1, {"train/loss": 1.0})
  worker = w._event_file._worker  # pylint: disable=protected-access
  worker.stop()  # as if it had died: nothing drains the queue any more
  with caplog.at_level(logging.WARNING):
    for step in range(2, 2 + 300):
      w.write_scalars(step, {f"perf/m{i}": float(i) for i in range(12)})
    w.close()
  assert "its writer thread ended" in caplog.text
  assert len(open(tmp_path / "metrics.jsonl").readlines()) == 301


def test_a_full_disk_at_the_metrics_append_is_one_error_and_no_partial_line(tmp_path, capfd):
  w = MetricWriter(str(tmp_path), enabled=True)
  w.write_scalars(1, {"train/loss": 1.0})
  w.write_scalars(2, {"train/loss": 2.0})
  before = (tmp_path / "metrics.jsonl").read_bytes()
  w._jsonl = _FullDisk(w._jsonl, room=25)  # pylint: disable=protected-access
  with pytest.raises(MetricsWriteError) as e:
    w.write_scalars(3, {"train/loss": 3.0})  # 25 bytes of it written, then ENOSPC
  assert re.fullmatch(
      rf"writing step 3 to metrics.jsonl failed: no space left on device in "
      rf"{re.escape(str(tmp_path))} \([\d.]+ MiB free\)\. The records and checkpoints "
      r"written before are intact; free space and run the same command again to resume\.",
      e.value.strerror), e.value.strerror
  assert e.value.errno == errno.ENOSPC and isinstance(e.value, OSError)
  assert (tmp_path / "metrics.jsonl").read_bytes() == before  # the partial line is gone
  _quiet(capfd.readouterr().err)


@pytest.fixture()
def full_disk(tmp_path):
  """A 1 MiB tmpfs, filled to the last byte after the test's first writes (root only)."""
  disk = tmp_path / "disk"
  disk.mkdir()
  if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                    capture_output=True).returncode:
    pytest.skip("mounting a tmpfs is not allowed here")

  def fill():
    with open(disk / "filler", "wb", buffering=0) as f:
      try:
        while True:
          f.write(b"\0" * 4096)
      except OSError as e:
        assert e.errno == errno.ENOSPC
  try:
    yield disk, fill
  finally:
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_real_full_disk_keeps_every_record_and_says_so_in_one_line(full_disk, caplog, capfd):
  disk, fill = full_disk
  w = MetricWriter(str(disk), enabled=True)
  w.write_scalars(1, {"train/loss": 1.0})
  fill()
  with caplog.at_level(logging.WARNING), pytest.raises(MetricsWriteError) as e:
    for step in range(2, 10_000):  # metrics.jsonl's last page fills, then the next fails
      w.write_scalars(step, {f"train/m{i}": float(i) for i in range(12)})
  assert e.value.strerror.startswith(f"writing step {step} to metrics.jsonl failed: no space "
                                     f"left on device in {disk} (0.0 MiB free).")
  steps = [json.loads(l)["step"] for l in open(disk / "metrics.jsonl")]  # every line whole
  assert steps == list(range(1, step))
  # A rerun on the still-full disk: its resume rewrite fails as one error, the file as it was.
  before = (disk / "metrics.jsonl").read_bytes()
  with pytest.raises(MetricsWriteError, match="rewriting metrics.jsonl for the resumed run "
                                              "failed: no space left on device"):
    MetricWriter(str(disk), enabled=True).resume_at(step // 2)
  assert (disk / "metrics.jsonl").read_bytes() == before
  assert sorted(p.name for p in disk.iterdir() if not p.name.startswith("events")) == [
      "filler", "metrics.jsonl"]  # no .tmp left behind
  _quiet(capfd.readouterr().err)
