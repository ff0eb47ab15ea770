"""bench/time_to_quality/modernbert_demo.py's result from synthetic curves (no training, no
timings), and the premise of its comparison: both configs read the same data."""
import os
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(_ROOT, "bench", "time_to_quality"), os.path.join(_ROOT, "bench")]
import modernbert_demo  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position


def _run(rate: float, tokens_per_s: float, budget: float = 360.0, every: float = 60.0):
  """A run whose accuracy rises by `rate` a minute; slices of `tokens_per_s`."""
  points = [i * every for i in range(int(budget // every) + 1)]
  curve = [{"step": int(t), "seconds": t, "tokens": int(t * tokens_per_s),
            "accuracy": rate * t / 60} for t in points]
  slices = [{"round": i, "step": int(t), "seconds": t, "tokens": int(t * tokens_per_s)}
            for i, t in enumerate(points[1:])]
  summary = {"steps": int(budget), "seconds": budget, "tokens": int(budget * tokens_per_s),
             "steady_tokens_per_s": tokens_per_s, "stopped": "budget", "batch_size": 32,
             "num_steps": int(budget)}
  return {"summary": summary, "curve": curve, "slices": slices}


def _figures(res):
  return {f["name"]: f["value"] for f in res["figures"]}


def test_the_result_gives_both_systems_at_the_marks_and_compares_them():
  runs = {"ours_demo": _run(0.04, 20000.0), "ours_modernbert": _run(0.03, 10000.0)}
  res = modernbert_demo.bench_result(runs, 360.0, 60.0, load_before=1.5)
  got = _figures(res)
  for short, rate in (("BERT-tiny :demo", 0.04), ("ModernBERT-tiny", 0.03)):
    for minutes in (2, 4, 6):
      assert got[f"{short} accuracy at {minutes} min"] == pytest.approx(rate * minutes)
    assert got[f"{short} final accuracy"] == pytest.approx(rate * 6)
    assert got[f"{short} steps"] == 360
    assert got[f"{short} curve"].startswith("0 s 0.0000, 60 s ")
  assert got["ModernBERT-tiny tokens/s"] == 10000 and got["BERT-tiny :demo tokens/s"] == 20000
  assert got["ModernBERT-tiny / BERT-tiny :demo accuracy at 6 min"] == pytest.approx(0.75)
  assert got["tokens/s, ModernBERT-tiny / BERT-tiny :demo"] == pytest.approx(0.5)
  assert res["headline"] == ("at 6 min: ModernBERT-tiny 0.1800, BERT-tiny :demo 0.2400 "
                             "held-out fill-mask accuracy (0.75x)")
  assert res["anchor"] == ("configs/bert_tiny.py:demo, same corpus, vocabulary, scorer and "
                           "minutes")
  assert res["suite"] == "modernbert_demo" and res["goal"] is None
  assert "load average 1.5 before" in res["notes"] and "took turns" in res["notes"]


def test_another_budget_is_marked_in_thirds():
  runs = {name: _run(0.06, 1.0, 90.0, 15.0) for name in ("ours_demo", "ours_modernbert")}
  res = modernbert_demo.bench_result(runs, 90.0, 15.0, load_before=None)
  got = _figures(res)
  assert got["ModernBERT-tiny accuracy at 30 s"] == pytest.approx(0.03)
  assert got["ModernBERT-tiny accuracy at 1 min"] == pytest.approx(0.06)
  assert got["ModernBERT-tiny accuracy at 90 s"] == pytest.approx(0.09)
  assert res["headline"].startswith("at 90 s: ModernBERT-tiny 0.0900, BERT-tiny :demo 0.0900")


def test_both_configs_read_the_same_data():
  assert modernbert_demo.data_differences() == []
