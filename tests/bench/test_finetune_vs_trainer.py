"""bench/finetune/vs_trainer.py's accuracy report over seeds and its --report re-print of a
saved run: no training, no timings (the runs below are made-up records)."""
import json
import os
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(_ROOT, "bench", "finetune"), os.path.join(_ROOT, "bench")]
import vs_trainer as fvt  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position


def _run(accuracy: float) -> dict:
  """One system's record as the bench saves it (4 steps of 32 examples)."""
  return {"process_s": 10.0, "step_s": [2.0, 1.0, 1.0, 1.0], "examples": [32.0] * 4,
          "real": 90, "computed": 100, "compiles": 21, "accuracy": accuracy}


def test_accuracy_summary_is_the_mean_range_and_binomial_standard_error():
  s = fvt.accuracy_summary([0.88, 0.92, 0.90], 300)
  assert s["mean"] == pytest.approx(0.90)
  assert (s["low"], s["high"]) == (0.88, 0.92)
  assert s["spread"] == pytest.approx(0.04)
  # sqrt(p (1 - p) / n) at p = 0.9, n = 300: sqrt(0.09 / 300) = 0.017320508...
  assert s["stderr"] == pytest.approx(0.0173205081, abs=1e-9)
  assert fvt.accuracy_summary([0.5], 100)["stderr"] == pytest.approx(0.05)


def test_within_spread_is_inclusive_of_the_padded_range():
  assert fvt.within_spread([0.88, 0.95, 0.80, 0.92], [0.80, 0.92, 0.90]) == [
      True, False, True, True]


def test_report_reprints_a_saved_run_with_per_seed_accuracy_and_verdict(
    tmp_path, monkeypatch, capsys):
  saved = {"results": {"packed 64": [_run(0.9), _run(0.95), _run(0.91)],
                       "padded 64": [_run(0.9), _run(0.92), _run(0.94)]},
           "n_train": 4886, "n_heldout": 300}
  path = tmp_path / "results.json"
  path.write_text(json.dumps(saved))
  monkeypatch.setattr(sys, "argv", ["finetune_vs_trainer.py", "--report", str(path)])
  fvt.main()
  out = capsys.readouterr().out
  # steady examples/s = steps 2..4: 96 examples in 3 s.
  assert "packed 64" in out and "32.00" in out
  assert "packed 64                seeds 0.9000 0.9500 0.9100: mean 0.9200" in out
  assert "range 0.9000-0.9500 (spread 0.0500)" in out
  assert "padded 64                seeds 0.9000 0.9200 0.9400: mean 0.9200" in out
  assert "packed 64 vs padded: 2 of 3 packed seeds within the padded seeds' range" in out
  assert "mean difference +0.0000" in out
