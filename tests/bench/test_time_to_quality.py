"""bench/time_to_quality/time_to_quality.py's scorer (bench/time_to_quality/scorer.py) and
its curve arithmetic (bench/time_to_quality/curves.py): no training, no timings."""
import os
import sys

import numpy as np
import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(_ROOT, "bench", "time_to_quality"), os.path.join(_ROOT, "bench")]
import curves as ttq_report  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
import scorer as ttq_scorer  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

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
                            picture=str(tmp_path / "ttq.png"), data_dir=str(tmp_path),
                            sequential=True, no_result=False,
                            results_dir=str(tmp_path / "results"))
  ttq.run(args)
  with open(tmp_path / "results.json", encoding="utf-8") as f:
    results = json.load(f)
  assert {k: v["curve"][-1]["accuracy"] for k, v in results["runs"].items()} == accuracy
  assert len(results["table"]) == 2 + 4 and (tmp_path / "ttq.png").exists()
  with open(tmp_path / "results" / "time_to_quality.json", encoding="utf-8") as f:
    bench = json.load(f)  # the bench result, written where --results-dir says
  assert bench["suite"] == "time_to_quality" and bench["carried"] is None


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


FAKE_WORKER = """
import json, sys
sys.path.insert(0, {bench!r})
import bench_util
name, slices, rate, log = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
bench_util.claim_stdout()
bench_util.pause({{"ready": True, "num_steps": slices}})
for i in range(1, slices + 1):
  with open(log, "a") as f:
    f.write(name + "\\n")
  report = {{"step": i, "seconds": 10.0 * i, "tokens": int(rate * 10 * i)}}
  if i < slices:
    bench_util.pause(report)
with open(log, "a") as f:
  f.write(name + " done\\n")
bench_util.reply({{"steps": slices, "seconds": 10.0 * slices, "tokens": int(rate * 10 * slices),
                  "stopped": "budget", "steady_tokens_per_s": rate}})
"""


def test_interleaved_runs_take_turns_and_give_slice_ratios(tmp_path, monkeypatch):
  """run_interleaved: real worker processes speaking bench_util.pause's protocol (a fake
  trainer: no jax, no torch) take turns slice by slice; a run that ends leaves the
  rotation; slice_ratios pairs the two sides' slices of each round, the first left out."""
  import argparse  # pylint: disable=g-import-not-at-top
  import time_to_quality as ttq  # pylint: disable=g-import-not-at-top
  script = tmp_path / "fake_worker.py"
  script.write_text(FAKE_WORKER.format(bench=os.path.dirname(os.path.dirname(ttq.__file__))))
  log = str(tmp_path / "turns.log")
  plan = {"ours": (4, 300.0), "theirs": (2, 100.0)}  # (slices, tokens/s)

  def argv(kind, name, spec, args):
    assert spec["interleave"] is True and kind == "x"
    slices, rate = plan[name]
    return [sys.executable, str(script), name, str(slices), str(rate), log], \
        str(tmp_path / f"{name}.curve.jsonl")

  import stages  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(stages, "worker_argv", argv)
  ended = []
  got = ttq.run_interleaved([("ours", "x", {}), ("theirs", "x", {})],
                            argparse.Namespace(out=str(tmp_path)), gap_s=0.0,
                            on_finish=lambda name, result: ended.append(
                                (name, len(result["slices"]))))
  assert ended == [("theirs", 2), ("ours", 4)]  # each saved as it ends, with its slices
  with open(log, encoding="utf-8") as f:
    turns = f.read().split("\n")
  # Round by round: ours, theirs; theirs ends in round 2, ours trains on alone.
  assert turns == ["ours", "theirs", "ours", "theirs", "theirs done", "ours", "ours",
                   "ours done", ""]
  assert [s["round"] for s in got["ours"]["slices"]] == [0, 1, 2, 3]
  assert got["theirs"]["slices"][-1] == {"round": 1, "step": 2, "seconds": 20.0,
                                         "tokens": 2000}
  assert got["theirs"]["summary"]["stopped"] == "budget" and got["theirs"]["curve"] == []
  # Only round 1 has both sides past the first round: 300 / 100 tokens/s.
  assert ttq.slice_ratios(got["ours"]["slices"], got["theirs"]["slices"]) == \
      pytest.approx([3.0])
  assert ttq.slice_ratios(got["ours"]["slices"], got["theirs"]["slices"], 0) == \
      pytest.approx([3.0, 3.0])
  # The report gives the goal both ways: whole runs, and the median of the slice pairs.
  results = {"runs": {"ours_bert": {"summary": got["ours"]["summary"],
                                    "slices": got["ours"]["slices"]},
                      "hf_defaults": {"summary": got["theirs"]["summary"],
                                      "slices": got["theirs"]["slices"]}}}
  ttq.report(results, argparse.Namespace())
  assert results["ratios"] == {
      "bert_tiny sizes": (3.0, 2.5),
      "bert_tiny sizes, median of 1 interleaved slices (3.00-3.00x)": (3.0, 2.5)}
  assert results["slice_ratios"] == {"bert_tiny sizes": pytest.approx([3.0])}
