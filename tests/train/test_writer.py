"""train/writer.py: what reaches TensorBoard and metrics.jsonl."""
import json
import logging
import math
import time

from bert_jax.train.writer import MetricWriter, progress_line


def test_non_finite_scalars_are_n_a_in_jsonl_and_absent_from_tensorboard(tmp_path, caplog):
  """A toy corpus without evaluation words gives NaN scores: no tensorboardX warning."""
  writer = MetricWriter(str(tmp_path), enabled=True)
  added = []
  add = writer.tb.add_scalar
  writer.tb.add_scalar = lambda k, v, step: (added.append(k), add(k, v, step))
  with caplog.at_level(logging.WARNING):
    writer.write_scalars(3, {"loss": 0.5, "wordsim353": math.nan, "analogy": math.inf})
  writer.close()
  assert added == ["loss"]
  assert not [r for r in caplog.records if "NaN or Inf" in r.getMessage()]
  (line,) = open(tmp_path / "metrics.jsonl").read().splitlines()
  record = json.loads(line)  # strict JSON: no bare NaN / Infinity
  assert record["loss"] == 0.5 and record["wordsim353"] == "n/a" and record["analogy"] == "n/a"
  assert "NaN" not in line and "Infinity" not in line


def test_progress_line_shows_the_task_labels():
  line = progress_line(120, 2000, {"loss": 6.1234, "mlm_accuracy": 0.0812, "mfu": 0.25},
                       65.0, labels=(("mlm_accuracy", "mlm_acc"),))
  assert line == "step 120/2000 | loss 6.1234 | mlm_acc 0.081 | mfu 25.0% | ETA 1m05s"


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
