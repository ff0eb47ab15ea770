"""The official SQuAD v1.1 and v2.0 evaluation (EM / F1), reproduced exactly.

Scores are percentages in [0, 100], as the official scripts print them, so numbers
compare directly with papers. The two scripts differ in ways that matter:

  * v1.1: token F1 of an empty prediction is 0; a question without a prediction scores
    0 and stays in the denominator.
  * v2.0: gold answers that normalize to "" are dropped, and an unanswerable question's
    only gold answer is "" (an empty prediction then scores EM = F1 = 1); token F1 is 1
    when both sides are empty and 0 when only one is; questions without a prediction
    are left out of the averages (and counted in "missing"); scores are also split
    into HasAns_* / NoAns_*. Given the no-answer scores (our null_odds.json) it also
    reports `find_all_best_thresh`'s best_exact / best_f1 and the thresholds reaching
    them.

tests/tasks/finetune/squad/test_metrics.py checks them on a fixture against values
worked out by hand from the official definitions.
"""
from __future__ import annotations

import collections
import re
import string
from typing import Mapping, Optional, Sequence

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
  """Lower case, drop ASCII punctuation, drop articles a/an/the, squash whitespace."""
  s = s.lower()
  s = "".join(ch for ch in s if ch not in _PUNCTUATION)
  s = _ARTICLES.sub(" ", s)
  return " ".join(s.split())


def exact_match(gold: str, prediction: str) -> float:
  return float(normalize_answer(gold) == normalize_answer(prediction))


def token_f1(gold: str, prediction: str, version_2: bool = False) -> float:
  """Bag-of-normalized-tokens F1; `version_2` gives the v2.0 rule for empty answers."""
  gold_toks = normalize_answer(gold).split()
  pred_toks = normalize_answer(prediction).split()
  if version_2 and (not gold_toks or not pred_toks):
    return float(gold_toks == pred_toks)  # no-answer: 1 only if both are empty
  num_same = sum((collections.Counter(gold_toks) & collections.Counter(pred_toks)).values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(pred_toks)
  recall = num_same / len(gold_toks)
  return 2 * precision * recall / (precision + recall)


def squad_v1_scores(gold_answers: Mapping[str, Sequence[str]],
                    predictions: Mapping[str, str]) -> dict:
  """Official v1.1 `evaluate`: max over gold answers, mean over all questions.

  Args:
    gold_answers: question id -> the gold answer texts (>= 1 each).
    predictions: question id -> predicted text.

  Returns:
    {"exact_match": %, "f1": %, "total": questions, "missing": questions without a
     prediction (scored 0, as the official script does)}.
  """
  em = f1 = 0.0
  missing = 0
  for qid, golds in gold_answers.items():
    if qid not in predictions:
      missing += 1
      continue
    pred = predictions[qid]
    em += max(exact_match(g, pred) for g in golds)
    f1 += max(token_f1(g, pred) for g in golds)
  total = len(gold_answers)
  return {"exact_match": 100.0 * em / total if total else 0.0,
          "f1": 100.0 * f1 / total if total else 0.0, "total": total, "missing": missing}


def squad_v2_raw_scores(gold_answers: Mapping[str, Sequence[str]],
                        predictions: Mapping[str, str]) -> tuple[dict, dict]:
  """Official v2.0 `get_raw_scores`: qid -> EM and qid -> F1 of each predicted question.

  Gold answers that normalize to "" are dropped; a question left with none has "" as
  its only correct answer. Questions without a prediction get no entry.
  """
  exact, f1 = {}, {}
  for qid, golds in gold_answers.items():
    golds = [g for g in golds if normalize_answer(g)] or [""]
    if qid in predictions:
      pred = predictions[qid]
      exact[qid] = max(exact_match(g, pred) for g in golds)
      f1[qid] = max(token_f1(g, pred, version_2=True) for g in golds)
  return exact, f1


def best_threshold(predictions: Mapping[str, str], scores: Mapping[str, float],
                   na_probs: Mapping[str, float],
                   has_answer: Mapping[str, bool]) -> tuple[float, float]:
  """Official v2.0 `find_best_thresh`: (best mean score in %, the na_prob threshold).

  A threshold t answers "" wherever na_prob > t. Start below every na_prob (all
  questions answered "": the no-answer questions of the whole data set score 1, the
  others 0), then lower the bar one question at a time in increasing na_prob (a stable
  sort, so ties keep the order of `na_probs`), switching it to its prediction: a
  question with an answer gains its raw score; one without loses 1 if its prediction
  is a non-empty string (the official test is the string's truth value, so "the",
  whose normalized form is "", still loses 1) and nothing if it is "". The first
  running total that beats every earlier one wins, with that question's na_prob as
  the threshold (0.0 when answering nothing is best). Questions of `na_probs` without
  a score are skipped; the total is divided by the number of scored questions.

  Args:
    predictions: qid -> predicted text (the file that was scored).
    scores: qid -> raw EM or F1 (`squad_v2_raw_scores`), before any threshold.
    na_probs: qid -> no-answer score (probability, or null-score difference).
    has_answer: qid -> whether the question has gold answers, for every question.
  """
  total = sum(not v for v in has_answer.values())
  best, best_thresh = total, 0.0
  for qid in sorted(na_probs, key=lambda q: na_probs[q]):
    if qid not in scores:
      continue
    if has_answer[qid]:
      total += scores[qid]
    elif predictions[qid]:
      total -= 1
    if total > best:
      best, best_thresh = total, na_probs[qid]
  return (100.0 * best / len(scores) if scores else 0.0), float(best_thresh)


def squad_v2_scores(gold_answers: Mapping[str, Sequence[str]],
                    predictions: Mapping[str, str],
                    na_probs: Optional[Mapping[str, float]] = None,
                    na_prob_thresh: float = 1.0) -> dict:
  """Official v2.0 `evaluate`, as `evaluate-v2.0.py data.json pred.json [-n na.json -t t]`.

  Args:
    gold_answers: question id -> gold answer texts; [] for an unanswerable question.
    predictions: question id -> predicted text, "" for "no answer".
    na_probs: optional question id -> the model's no-answer score (our predict mode
      writes null_odds.json: null score - best span score), for every predicted
      question. A question whose score exceeds `na_prob_thresh` is scored as if
      predicted "" (the official --na-prob-thresh), and the best thresholds are added.
    na_prob_thresh: the official default 1.0.

  Returns:
    The official keys: {"exact", "f1": % over the predicted questions, "total",
    "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1",
    "NoAns_total" (when that subset is non-empty), and with na_probs "best_exact",
    "best_exact_thresh", "best_f1", "best_f1_thresh"}, plus "missing" (questions
    without a prediction).

  Deliberate differences from the script, which crashes where we count: a question
  without a prediction is left out of every average (the script prints it, leaves it
  out of exact/f1 and raises KeyError in HasAns/NoAns), and an empty set scores 0.
  "Has an answer" is the script's: a non-empty gold list, even one whose texts all
  normalize to "" (whose only correct prediction is then "", yet a no-answer
  threshold scores it 0).
  """
  has_answer = {qid: bool(golds) for qid, golds in gold_answers.items()}
  exact_raw, f1_raw = squad_v2_raw_scores(gold_answers, predictions)
  exact, f1 = exact_raw, f1_raw
  if na_probs is not None:
    lacking = [q for q in exact_raw if q not in na_probs]
    if lacking:
      raise ValueError(f"na_probs has no value for {len(lacking)} predicted question(s), "
                       f"e.g. {lacking[0]!r}.")

    def threshold(raw):  # official apply_no_ans_threshold
      return {q: float(not has_answer[q]) if na_probs[q] > na_prob_thresh else s
              for q, s in raw.items()}

    exact, f1 = threshold(exact_raw), threshold(f1_raw)

  def mean(scores, ids):
    return 100.0 * sum(scores[q] for q in ids) / len(ids) if ids else 0.0

  out = {"exact": mean(exact, list(exact)), "f1": mean(f1, list(f1)), "total": len(exact),
         "missing": len(gold_answers) - len(exact)}
  for name, want in (("HasAns", True), ("NoAns", False)):
    ids = [q for q in exact if has_answer[q] == want]
    if ids:
      out.update({f"{name}_exact": mean(exact, ids), f"{name}_f1": mean(f1, ids),
                  f"{name}_total": len(ids)})
  if na_probs is not None:  # official find_all_best_thresh, on the raw scores
    out["best_exact"], out["best_exact_thresh"] = best_threshold(
        predictions, exact_raw, na_probs, has_answer)
    out["best_f1"], out["best_f1_thresh"] = best_threshold(
        predictions, f1_raw, na_probs, has_answer)
  return out
