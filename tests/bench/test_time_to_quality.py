"""bench/time_to_quality.py's scorer (bench/ttq_scorer.py) and its curve arithmetic
(bench/ttq_report.py): no training, no timings."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "bench"))
import ttq_report  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
import ttq_scorer  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

PAD, CLS, SEP, MASK, VOCAB = 0, 2, 3, 4, 50
SPECIAL = (0, 1, 2, 3, 4)


@pytest.fixture(scope="module")
def masked():
  """400 rows of 64 tokens drawn from ids 5..49 with a skew (id 5 is every 4th token)."""
  rng = np.random.default_rng(1)
  docs = []
  for _ in range(100):
    sentences = []
    for _ in range(8):
      s = rng.integers(6, VOCAB, size=rng.integers(5, 30))
      s[::4] = 5
      sentences.append(s.tolist())
    docs.append(sentences)
  rows = ttq_scorer.document_rows(docs, 64, CLS, SEP)
  return rows, ttq_scorer.draw_masked_set(rows, 64, VOCAB, SPECIAL, MASK, PAD, seed=0)


def test_rows_are_whole_sentences_of_one_document():
  rows = ttq_scorer.document_rows([[[7] * 3, [8] * 4, [9] * 20], [[10] * 2]], 12, CLS, SEP)
  got = [r.tolist() for r in rows]
  # [CLS] s1 s2 [SEP] (7 + 2 <= 12); s3 (20 > 10) cut into its own rows; doc 2 alone.
  assert got == [[CLS] + [7] * 3 + [8] * 4 + [SEP], [CLS] + [9] * 10 + [SEP],
                 [CLS] + [9] * 10 + [SEP], [CLS] + [10] * 2 + [SEP]]


def test_the_set_follows_bert_masking(masked):
  rows, m = masked
  w = m["weights"].astype(bool)
  n_tokens = np.array([len(r) - 2 for r in rows])          # non-special tokens per row
  # google-research/bert's count: round(15%), at least 1, at most max_predictions (20).
  np.testing.assert_array_equal(w.sum(1), np.clip(np.round(0.15 * n_tokens), 1, 20))
  originals = np.stack([np.pad(r, (0, 64 - len(r))) for r in rows])
  pos = np.where(w, m["positions"], 0)
  np.testing.assert_array_equal(np.take_along_axis(originals, pos, 1)[w], m["labels"][w])
  assert not np.isin(m["labels"][w], SPECIAL).any()        # [CLS]/[SEP]/[PAD] never masked
  seen = np.take_along_axis(m["input_ids"], pos, 1)[w]
  frac_mask = np.mean(seen == MASK)
  frac_kept = np.mean(seen == m["labels"][w])
  # 80/10/10 (a random token may equal the original: +1/45 of 10% on "kept").
  assert abs(frac_mask - 0.8) < 0.03 and abs(frac_kept - (0.1 + 0.1 / 45)) < 0.02
  assert not np.isin(seen[(seen != MASK)], SPECIAL).any()
  # Outside the masked positions the input is the original row.
  off = np.ones_like(originals, bool)
  np.put_along_axis(off, pos, False, 1)
  off[:, 0] = True
  np.testing.assert_array_equal(np.where(off, m["input_ids"], 0), np.where(off, originals, 0))
  np.testing.assert_array_equal(m["attention_mask"], (originals > 0).astype(np.int32))
  # Drawn once: the same seed draws the same set.
  again = ttq_scorer.draw_masked_set(rows, 64, VOCAB, SPECIAL, MASK, PAD, seed=0)
  for k in ttq_scorer.KEYS:
    np.testing.assert_array_equal(again[k], m[k])


def test_accuracy_of_known_predictors(masked, tmp_path):
  _, m = masked
  path = str(tmp_path / "set.npz")
  ttq_scorer.save(path, m)
  m = ttq_scorer.load(path)
  w = m["weights"] > 0
  assert ttq_scorer.accuracy(m["labels"], m) == 1.0        # predicts the original token
  # A constant predictor scores the token's frequency among the masked originals
  # (~1/4 for id 5, planted at every 4th position).
  freq = np.mean(m["labels"][w] == 5)
  assert 0.2 < freq < 0.35
  assert ttq_scorer.accuracy(np.full_like(m["labels"], 5), m) == pytest.approx(freq)
  # Padding slots do not count: a wrong guess there changes nothing.
  noisy = np.where(w, m["labels"], 7)
  assert ttq_scorer.accuracy(noisy, m) == 1.0
  with pytest.raises(ValueError, match="shape"):
    ttq_scorer.accuracy(m["labels"][:, :3], m)


def test_curve_arithmetic():
  curve = [{"seconds": 0.0, "accuracy": 0.0}, {"seconds": 30.0, "accuracy": 0.1},
           {"seconds": 60.0, "accuracy": 0.3}, {"seconds": 90.0, "accuracy": 0.2}]
  assert ttq_report.accuracy_at(curve, 45.0) == pytest.approx(0.2)
  assert ttq_report.accuracy_at(curve, 500.0) == 0.2       # past the end: its last value
  assert ttq_report.seconds_to_reach(curve, 0.2) == pytest.approx(45.0)
  assert ttq_report.seconds_to_reach(curve, 0.31) is None


def test_goals_and_table():
  line = lambda *acc: [{"seconds": 30.0 * i, "accuracy": a} for i, a in enumerate(acc)]
  summary = {"steps": 10, "seconds": 120.0, "steady_tokens_per_s": 1000.0}
  runs = {"hf_tuned": {"label": "tuned", "curve": line(0.0, 0.02, 0.05, 0.08, 0.1),
                       "summary": summary},
          "ours_demo": {"label": "demo", "curve": line(0.0, 0.2, 0.3, 0.31, 0.32),
                        "summary": summary}}
  got = ttq_report.goals(runs, {"bert_tiny": (2.4, 2.5)})
  # 0.1 reached at 15 s = 12.5% of the tuned run's 120 s; 0.32 / 0.1 = 3.2x; 2.4 < 2.5.
  assert got[0].endswith("in 15 s = 12% of the tuned run's clock (goal <= 25%): met")
  assert got[1].endswith("3.20x (goal >= 3x): met") and got[2].endswith("MISSED")
  rows = ttq_report.table(runs, "hf_tuned")
  assert rows[2].startswith("| tuned | 10 | 120 | 1,000 | 0.1000 | 0.1000 | 0.1000 |")


def test_the_runs_stage_keeps_every_run_and_draws_the_table(tmp_path, monkeypatch):
  """Each run is saved as it ends and the report sees all four (the first idle run of the
  bench lost three: a save rebound results["runs"] while the loop wrote into the old dict)."""
  import argparse  # pylint: disable=g-import-not-at-top
  import json  # pylint: disable=g-import-not-at-top
  import time_to_quality as ttq  # pylint: disable=g-import-not-at-top

  accuracy = {"hf_defaults": 0.04, "ours_bert": 0.09, "ours_demo": 0.25, "hf_tuned": 0.06}

  def worker(kind, name, spec, args):
    del kind, spec, args
    return {"summary": {"steps": 10, "seconds": 60.0, "steady_tokens_per_s": 1000.0},
            "curve": [{"seconds": 0.0, "accuracy": 0.0},
                      {"seconds": 60.0, "accuracy": accuracy[name]}]}

  monkeypatch.setattr(ttq, "prepare_data", lambda args: {})
  monkeypatch.setattr(ttq, "hf_spec", lambda *a, **k: {})
  monkeypatch.setattr(ttq, "ours_spec", lambda *a, **k: {})
  monkeypatch.setattr(ttq, "tune", lambda data, args: (
      {"learning_rate": 5e-4, "lr_scheduler_type": "linear"}, []))
  monkeypatch.setattr(ttq, "run_worker", worker)
  args = argparse.Namespace(out=str(tmp_path), stages="tune,runs,base", runs=",".join(ttq.LABELS),
                            budget=60.0, every=30.0, base_steps=0, threads=2, note="",
                            picture=str(tmp_path / "ttq.png"), data_dir=str(tmp_path))
  ttq.run(args)
  with open(tmp_path / "results.json", encoding="utf-8") as f:
    results = json.load(f)
  assert {k: v["curve"][-1]["accuracy"] for k, v in results["runs"].items()} == accuracy
  assert len(results["table"]) == 2 + 4 and (tmp_path / "ttq.png").exists()


def test_our_runs_take_the_overrides_and_the_fit_switch():
  """--ours_overrides reach our runs' configs (under a stage's own, e.g. the base sizes);
  --no_fit keeps their num_steps (the fixed-step trials of RESULTS "What moves :demo")."""
  import argparse  # pylint: disable=g-import-not-at-top
  import time_to_quality as ttq  # pylint: disable=g-import-not-at-top
  args = argparse.Namespace(data_dir="/data", out="/out", fit_steps=False,
                            ours_overrides={"train.learning_rate": 0.003, "model.num_layers": 4})
  spec = ttq.ours_spec("demo", {"masked_demo": "/out/masked_4096.npz"}, 360.0, 30.0, args,
                       overrides={"model.num_layers": 12})
  assert spec["overrides"] == {"data.data_dir": "/data", "train.learning_rate": 0.003,
                               "model.num_layers": 12}
  assert spec["fit_steps"] is False and spec["config"].endswith("configs/bert_tiny.py:demo")
  assert spec["masked"] == "/out/masked_4096.npz" and spec["workdir"] == "/out/ours_demo"
