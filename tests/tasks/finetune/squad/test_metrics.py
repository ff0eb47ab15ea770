"""SQuAD v2.0's official scores (HasAns / NoAns, best thresholds) on a hand-made fixture.

tests/testdata/tasks/squad_v2_eval/: dev.json (4 answerable, 3 unanswerable questions),
predictions.json and null_odds.json in the official formats (what our predict mode
writes). Every expected value is worked out below by hand from the definitions of the
official evaluate-v2.0.py (get_raw_scores, apply_no_ans_threshold, make_eval_dict,
find_best_thresh); then a randomized check that best_f1 is the maximum of a brute-force
scan over every threshold.
"""
import json
import pathlib

import numpy as np
import pytest

from bert_jax.tasks.finetune.squad import data
from bert_jax.tasks.finetune.squad import metrics as S

FIXTURE = pathlib.Path(__file__).parents[3] / "testdata" / "tasks" / "squad_v2_eval"


@pytest.fixture(name="fixture")
def _fixture():
  examples, _ = data.read_squad_json(FIXTURE / "dev.json")
  gold = data.squad_gold_answers(examples)
  preds = json.loads((FIXTURE / "predictions.json").read_text())
  na_probs = json.loads((FIXTURE / "null_odds.json").read_text())
  return gold, preds, na_probs


def test_raw_scores_by_hand(fixture):
  gold, preds, _ = fixture
  exact, f1 = S.squad_v2_raw_scores(gold, preds)
  # h1 "Shanghai" = gold. h2 "also a financial center" -> [also, financial, center]
  # against "financial center" (2 tokens): 2 common, P 2/3, R 1, F1 = (4/3)/(5/3) = 0.8;
  # against the longer gold [financial, center, its, fashion, capital]: P 2/3, R 2/5,
  # F1 = (8/15)/(16/15) = 0.5; the max is 0.8. h3 "" against "China": 0.
  # h4's only gold "The" normalizes to "", so "" is its only correct answer: 1.
  # n1 "" = no answer: 1. n2 "fashion capital" where there is none: 0.
  # n3 "The" normalizes to "": EM = F1 = 1 (it still counts as an answer below).
  assert exact == {"h1": 1, "h2": 0, "h3": 0, "n1": 1, "n2": 0, "h4": 1, "n3": 1}
  assert f1 == pytest.approx({"h1": 1, "h2": 0.8, "h3": 0, "n1": 1, "n2": 0, "h4": 1,
                              "n3": 1}, abs=1e-15)


def test_official_v2_scores_without_na_probs(fixture):
  gold, preds, _ = fixture
  r = S.squad_v2_scores(gold, preds)
  # exact: h1 1 + h4 1 + n1 1 + n3 1 = 4 of 7; f1: 4 + 0.8 (h2) = 4.8 of 7.
  assert r["exact"] == pytest.approx(100 * 4 / 7, abs=1e-12)
  assert r["f1"] == pytest.approx(100 * 4.8 / 7, abs=1e-12)
  # HasAns = h1..h4 (a non-empty answer list, h4 too): exact 2/4, f1 (1 + 0.8 + 1)/4.
  assert (r["HasAns_exact"], r["HasAns_f1"], r["HasAns_total"]) == (
      pytest.approx(50.0, abs=1e-12), pytest.approx(70.0, abs=1e-12), 4)
  # NoAns = n1..n3: n1 and n3 right.
  assert (r["NoAns_exact"], r["NoAns_f1"], r["NoAns_total"]) == (
      pytest.approx(200 / 3, abs=1e-12), pytest.approx(200 / 3, abs=1e-12), 3)
  assert (r["total"], r["missing"]) == (7, 0)
  assert "best_f1" not in r  # only with --na-prob-file


def test_official_v2_scores_with_null_odds_by_hand(fixture):
  gold, preds, na_probs = fixture
  r = S.squad_v2_scores(gold, preds, na_probs=na_probs)  # the default --na-prob-thresh 1.0
  # apply_no_ans_threshold: na > 1.0 for h4 (2.0) and n1 (1.5) -> float(not has_ans):
  # h4 0 (was 1), n1 1. exact = h1 + n1 + n3 = 3/7; f1 = 3 + 0.8 = 3.8/7.
  assert r["exact"] == pytest.approx(100 * 3 / 7, abs=1e-12)
  assert r["f1"] == pytest.approx(100 * 3.8 / 7, abs=1e-12)
  assert r["HasAns_exact"] == pytest.approx(25.0, abs=1e-12)  # h1 only
  assert r["HasAns_f1"] == pytest.approx(45.0, abs=1e-12)  # (1 + 0.8) / 4
  assert r["NoAns_exact"] == pytest.approx(200 / 3, abs=1e-12)
  # find_best_thresh starts from "answer nothing": the 3 no-answer questions score,
  # total 3, threshold 0.0; then in increasing null odds each question gets its answer:
  #   h1 (-3.0) +1        -> 4 (best EM: 4, thr -3.0)     F1: 4   (best, thr -3.0)
  #   h2 (-1.0) +0 / +0.8 -> 4 (not better)               F1: 4.8 (best, thr -1.0)
  #   n2 (-0.5) non-empty answer to a no-answer question: -1 -> 3; F1 3.8
  #   n3 (-0.2) "The" is a non-empty string: -1 (its raw EM 1 is not used) -> 2; F1 2.8
  #   h3 (0.5) +0 -> 2; n1 (1.5) "" +0 -> 2; h4 (2.0) +1 -> 3; F1 ends at 3.8
  # best_exact = 100 * 4 / 7 at -3.0; best_f1 = 100 * 4.8 / 7 at -1.0.
  assert r["best_exact"] == pytest.approx(100 * 4 / 7, abs=1e-12)
  assert r["best_exact_thresh"] == -3.0
  assert r["best_f1"] == pytest.approx(100 * 4.8 / 7, abs=1e-12)
  assert r["best_f1_thresh"] == -1.0
  # Another threshold: na > -1.5 for all but h1: the has-answer ones score 0, the
  # no-answer ones 1: h1 + n1 + n2 + n3 = 4/7 for both EM and F1.
  r = S.squad_v2_scores(gold, preds, na_probs=na_probs, na_prob_thresh=-1.5)
  assert r["exact"] == r["f1"] == pytest.approx(100 * 4 / 7, abs=1e-12)


def test_ties_in_null_odds_follow_the_official_order():
  # find_best_thresh sorts stably and compares after every question, so within a tie
  # a running total that no threshold gives can win (official behaviour, kept).
  gold = {"a": ["x"], "b": []}
  preds = {"a": "x", "b": "y"}
  # Start 1 (b is a no-answer question); a +1 -> 2 (best, thr 0.0); b -1 -> 1.
  assert S.best_threshold(preds, {"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 0.0},
                          {"a": True, "b": False}) == (100.0, 0.0)
  # The other order: b -1 -> 0; a +1 -> 1, never above the start.
  assert S.best_threshold(preds, {"a": 1.0, "b": 0.0}, {"b": 0.0, "a": 0.0},
                          {"a": True, "b": False}) == (50.0, 0.0)
  r = S.squad_v2_scores(gold, preds, na_probs={"a": 0.0, "b": 0.0})
  assert r["best_exact"] == 100.0 and r["exact"] == 50.0


def test_missing_predictions_and_na_probs():
  gold = {"q1": ["Paris"], "q2": [], "q3": ["Rome"]}
  r = S.squad_v2_scores(gold, {"q1": "Paris", "q2": ""}, na_probs={"q1": -1.0, "q2": 1.0})
  assert (r["total"], r["missing"], r["exact"]) == (2, 1, 100.0)
  # Start: 1 no-answer question of the 3 in the data; q1 +1 -> 2; q2 "" +0. 2 of the
  # 2 scored questions: 100% (the official denominator is the predicted questions).
  assert (r["best_exact"], r["best_exact_thresh"]) == (100.0, -1.0)
  with pytest.raises(ValueError, match="na_probs has no value for 1 predicted .*'q2'"):
    S.squad_v2_scores(gold, {"q1": "Paris", "q2": ""}, na_probs={"q1": 0.0})


def test_best_f1_equals_a_brute_force_threshold_scan():
  """best_f1 / best_exact = the best official score over every threshold t (questions
  with na_prob > t answered ""), found by rescoring at each distinct na_prob.

  Predictions are real words, never text that normalizes to "" ("the"): for those the
  official scan (a non-empty string loses 1) and rescoring (EM 1) disagree by design.
  """
  rng = np.random.default_rng(0)
  words = np.array(["paris", "city", "river", "old", "town", "north", "bridge", "museum"])

  def phrase():
    return " ".join(rng.choice(words, int(rng.integers(1, 4))))

  for _ in range(300):
    n = int(rng.integers(1, 15))
    gold, preds, na_probs = {}, {}, {}
    for i, na in enumerate(rng.normal(0.0, 2.0, n)):  # distinct values
      q = f"q{i}"
      gold[q] = [] if rng.random() < 0.4 else [phrase() for _ in range(rng.integers(1, 3))]
      preds[q] = "" if rng.random() < 0.4 else phrase()
      na_probs[q] = float(na)
    r = S.squad_v2_scores(gold, preds, na_probs=na_probs)
    answer_nothing = -np.inf
    scan = {t: S.squad_v2_scores(gold, preds, na_probs=na_probs, na_prob_thresh=t)
            for t in [answer_nothing, *sorted(na_probs.values())]}
    for key in ("exact", "f1"):
      best = max(s[key] for s in scan.values())
      assert r[f"best_{key}"] == pytest.approx(best, abs=1e-9), (gold, preds, na_probs)
      thresh = r[f"best_{key}_thresh"]
      if r[f"best_{key}"] > scan[answer_nothing][key] + 1e-9:  # else the official 0.0
        assert scan[thresh][key] == pytest.approx(best, abs=1e-9)
        if key == "exact":  # integer totals: the first (lowest) threshold reaching it
          assert thresh == min(t for t, s in scan.items() if s[key] > best - 1e-9)
