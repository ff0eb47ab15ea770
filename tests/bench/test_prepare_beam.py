"""bench/data/prepare_beam.py's result file: Beam's scaling and per-core rate against the
in-process preparation, from the modes' rows (no preparation here)."""
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(_ROOT, "bench", "data"), _ROOT]
import prepare_beam  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position


def _row(tok_s, tok_cpu_s, tokens=1000):
  return {"tokens": tokens, "wall": tokens / tok_s, "whole_tok_s": tok_s,
          "whole_tok_per_cpu_s": tok_cpu_s}


def test_the_goal_needs_both_beam_modes_and_the_in_process_pair():
  rows = {"in_process:2": _row(260.0, 200.0), "beam:1": _row(180.0, 185.0),
          "beam:2": _row(300.0, 174.0)}
  res = prepare_beam.beam_result(rows, 102_000_000, 0.5)
  assert res["goal"]["met"] is True  # 300 / 180 = 1.67x; 174 / 200 = 0.87x
  assert res["headline"] == "Beam 2 workers 1.67x its 1 worker; per CPU-second 0.87x in process"
  rows["beam:2"] = _row(250.0, 174.0)  # 1.39x: does not scale
  assert prepare_beam.beam_result(rows, 102_000_000, 0.5)["goal"]["met"] is False
  del rows["beam:1"]
  alone = prepare_beam.beam_result(rows, 102_000_000, 0.5)
  assert alone["goal"] is None and alone["headline"].startswith("in_process:2 260 tok/s")
