"""train/writer.py: what reaches TensorBoard and metrics.jsonl."""
import json
import logging
import math

from bert_jax.train.writer import MetricWriter, progress_line


def test_non_finite_scalars_are_n_a_in_jsonl_and_absent_from_tensorboard(tmp_path, caplog):
  """A toy corpus without evaluation words gives NaN scores: no tensorboardX warning."""
  writer = MetricWriter(str(tmp_path), enabled=True)
  added = []
  add = writer._tb.add_scalar  # pylint: disable=protected-access
  writer._tb.add_scalar = lambda k, v, step: (added.append(k), add(k, v, step))  # pylint: disable=protected-access
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
