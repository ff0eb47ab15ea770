"""The official SQuAD v1.1 and v2.0 evaluation (EM / F1), reproduced exactly.

Scores are percentages in [0, 100], as the official scripts print them, so numbers
compare directly with papers. The two scripts differ in ways that matter:

  * v1.1: token F1 of an empty prediction is 0; a question without a prediction scores
    0 and stays in the denominator.
  * v2.0: gold answers that normalize to "" are dropped, and an unanswerable question's
    only gold answer is "" (an empty prediction then scores EM = F1 = 1); token F1 is 1
    when both sides are empty and 0 when only one is; questions without a prediction
    are left out of the averages (and counted in "missing").
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


def squad_v2_scores(gold_answers: Mapping[str, Sequence[str]],
                    predictions: Mapping[str, str],
                    na_probs: Optional[Mapping[str, float]] = None,
                    na_prob_thresh: float = 1.0) -> dict:
  """Official v2.0 `evaluate` (without the best-threshold search).

  Args:
    gold_answers: question id -> gold answer texts; [] (or only blank answers) for an
      unanswerable question.
    predictions: question id -> predicted text, "" for "no answer".
    na_probs: optional question id -> model's no-answer probability; a question whose
      probability exceeds `na_prob_thresh` is scored as if predicted "" (official flag).
    na_prob_thresh: the official script's default 1.0 never triggers.

  Returns:
    {"exact", "f1": % over answered-by-model questions, "total", "missing", and
     "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1",
     "NoAns_total" when that subset is non-empty} (the official keys).
  """
  exact, f1, has_ans = {}, {}, {}
  missing = 0
  for qid, golds in gold_answers.items():
    golds = [g for g in golds if normalize_answer(g)]
    has_ans[qid] = bool(golds)
    golds = golds or [""]  # the only correct answer to an unanswerable question
    if qid not in predictions:
      missing += 1
      continue
    pred = predictions[qid]
    exact[qid] = max(exact_match(g, pred) for g in golds)
    f1[qid] = max(token_f1(g, pred, version_2=True) for g in golds)
    if na_probs is not None and na_probs.get(qid, 0.0) > na_prob_thresh:
      exact[qid] = f1[qid] = float(not has_ans[qid])

  def mean(scores, ids):
    return 100.0 * sum(scores[q] for q in ids) / len(ids)

  out = {"exact": mean(exact, exact) if exact else 0.0, "f1": mean(f1, f1) if f1 else 0.0,
         "total": len(exact), "missing": missing}
  for name, want in (("HasAns", True), ("NoAns", False)):
    ids = [q for q in exact if has_ans[q] == want]
    if ids:
      out.update({f"{name}_exact": mean(exact, ids), f"{name}_f1": mean(f1, ids),
                  f"{name}_total": len(ids)})
  return out
