"""Official fine-tuning metrics on the host: classification, regression, entities.

Numpy/python only. Every function takes the gold values first, then the predictions
(the order of sklearn and seqeval), and returns plain floats in [0, 1] (SQuAD's
percentages live in `squad/metrics.py`). Definitions follow the references exactly:

  * accuracy, binary F1, per-class precision/recall/F1 and macro-F1: sklearn, with
    `zero_division=0` (a class never predicted has precision 0, not NaN);
  * Matthews correlation (CoLA): sklearn's multiclass formula, 0 when undefined;
  * Pearson and Spearman (STS-B): scipy.stats (Spearman = Pearson of average ranks),
    NaN when an input is constant (scipy's exact-equality test);
  * entity precision/recall/F1: seqeval's default (conlleval-like) mode, or its strict
    IOB2 mode (`mode="strict", scheme=IOB2`).

tests/tasks/finetune/test_metrics_fidelity.py checks all of them against sklearn, scipy
and seqeval on 1,000 random cases each, and lists where we deliberately differ (we
raise on malformed tags where seqeval warns; Pearson of one value is NaN where scipy
raises).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


def _as_pair(labels, predictions):
  labels, predictions = np.asarray(labels), np.asarray(predictions)
  if labels.shape != predictions.shape or labels.ndim != 1:
    raise ValueError(f"Expected two 1-D arrays of equal length, got {labels.shape} "
                     f"and {predictions.shape}.")
  if labels.size == 0:
    raise ValueError("Metrics of an empty set are undefined.")
  return labels, predictions


# ------------------------------------------------------------------- classification
def accuracy(labels, predictions) -> float:
  labels, predictions = _as_pair(labels, predictions)
  return float(np.mean(labels == predictions))


def binary_f1(labels, predictions, pos_label=1) -> float:
  """F1 of the positive class (MRPC, QQP): 2 tp / (2 tp + fp + fn); 0 if no positives."""
  labels, predictions = _as_pair(labels, predictions)
  tp = np.sum((predictions == pos_label) & (labels == pos_label))
  fp = np.sum((predictions == pos_label) & (labels != pos_label))
  fn = np.sum((predictions != pos_label) & (labels == pos_label))
  denom = 2 * tp + fp + fn
  return float(2 * tp / denom) if denom else 0.0


def precision_recall_f1(labels, predictions, classes: Optional[Sequence] = None) -> dict:
  """Per-class precision, recall, F1 and support (sklearn, zero_division=0).

  Args:
    labels, predictions: [N] class ids (or names).
    classes: the classes to report, in order; default (as sklearn) the sorted union of
      the values seen in labels and predictions. Pass `range(num_classes)` so that a
      class missing from both still gets a row (with zeros).

  Returns:
    {"classes": [C], "precision": [C], "recall": [C], "f1": [C] float64 arrays,
     "support": [C] int64 (gold count per class)}.
  """
  labels, predictions = _as_pair(labels, predictions)
  if classes is None:
    classes = np.unique(np.concatenate([labels, predictions]))
  classes = np.asarray(list(classes))
  gold = labels[None, :] == classes[:, None]  # [C, N]
  pred = predictions[None, :] == classes[:, None]  # [C, N]
  tp = np.sum(gold & pred, axis=1)
  n_pred, n_gold = pred.sum(axis=1), gold.sum(axis=1)
  precision = np.divide(tp, n_pred, out=np.zeros(len(classes)), where=n_pred > 0)
  recall = np.divide(tp, n_gold, out=np.zeros(len(classes)), where=n_gold > 0)
  # sklearn's form 2 tp / (gold + predicted): the same value as 2PR / (P + R), and the
  # same rounding as sklearn's.
  both = n_gold + n_pred
  f1 = np.divide(2 * tp, both, out=np.zeros(len(classes)), where=both > 0)
  return {"classes": classes, "precision": precision, "recall": recall, "f1": f1,
          "support": n_gold.astype(np.int64)}


def macro_f1(labels, predictions, classes: Optional[Sequence] = None) -> float:
  """Unweighted mean of the per-class F1: every class counts the same (imbalance)."""
  return float(np.mean(precision_recall_f1(labels, predictions, classes)["f1"]))


def matthews_corrcoef(labels, predictions) -> float:
  """MCC (CoLA), sklearn's multiclass form; 0.0 when a marginal is constant."""
  labels, predictions = _as_pair(labels, predictions)
  classes, idx = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
  y, p = idx[:len(labels)], idx[len(labels):]
  confusion = np.zeros((len(classes), len(classes)), dtype=np.float64)  # [gold, pred]
  np.add.at(confusion, (y, p), 1.0)
  t_sum, p_sum = confusion.sum(axis=1), confusion.sum(axis=0)
  n_correct, n = np.trace(confusion), confusion.sum()
  cov_yp = n_correct * n - t_sum @ p_sum
  cov_pp = n * n - p_sum @ p_sum
  cov_yy = n * n - t_sum @ t_sum
  if cov_pp * cov_yy == 0:
    return 0.0
  return float(cov_yp / np.sqrt(cov_yy * cov_pp))


# ----------------------------------------------------------------------- regression
def _constant(x: np.ndarray) -> bool:
  # Exact equality, as scipy tests it: mean-centring [0.1] * 3 leaves ~1e-17 residues
  # whose "correlation" would be noise.
  return bool(np.all(x == x[0]))


def pearson(labels, predictions) -> float:
  """Pearson's r; NaN if either side is constant (as scipy, which also warns)."""
  x, y = (np.asarray(a, dtype=np.float64) for a in _as_pair(labels, predictions))
  if _constant(x) or _constant(y):
    return float("nan")
  x, y = x - x.mean(), y - y.mean()
  denom = np.sqrt((x @ x) * (y @ y))
  return float(x @ y / denom) if denom > 0 else float("nan")


def _average_ranks(x: np.ndarray) -> np.ndarray:
  """1-based ranks, ties get the mean of their ranks (scipy.stats.rankdata 'average')."""
  order = np.argsort(x, kind="stable")
  xs = x[order]
  new_group = np.r_[True, xs[1:] != xs[:-1]]
  starts = np.flatnonzero(new_group)
  ends = np.r_[starts[1:], len(x)]  # exclusive
  ranks = np.empty(len(x), dtype=np.float64)
  ranks[order] = ((starts + ends + 1) / 2.0)[np.cumsum(new_group) - 1]
  return ranks


def spearman(labels, predictions) -> float:
  """Spearman's rho: Pearson's r of the tie-averaged ranks; NaN if an input has a NaN."""
  x, y = (np.asarray(a, dtype=np.float64) for a in _as_pair(labels, predictions))
  if np.isnan(x).any() or np.isnan(y).any():  # scipy's nan_policy="propagate"
    return float("nan")
  return pearson(_average_ranks(x), _average_ranks(y))


# ------------------------------------------------------------------------- entities
ENTITY_MODES = ("default", "strict")


def _split_tag(tag: str) -> tuple[str, str]:
  """'B-PER' -> ('B', 'PER'); 'O' -> ('O', '_'); a bare 'B' -> ('B', '_') (as seqeval)."""
  return tag[0], (tag[1:].split("-", maxsplit=1)[-1] or "_")


def _ends(prev_tag, tag, prev_type, type_) -> bool:
  if prev_tag in ("E", "S"):
    return True
  if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
    return True
  return prev_tag not in ("O", ".") and prev_type != type_


def _starts(prev_tag, tag, prev_type, type_) -> bool:
  if tag in ("B", "S"):
    return True
  # An I-/E- right after O, E- or S- opens a chunk: conlleval's lenient reading, which
  # is also what makes IOB1 (I- starts, B- only splits adjacent same-type chunks) work.
  if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
    return True
  return tag not in ("O", ".") and prev_type != type_


def get_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
  """Chunks (type, first, last) of one tag sequence; seqeval's default-mode decoder.

  Accepts BIO (IOB2), IOB1 and IOBES tags; lenient like conlleval: an I- tag after O or
  after a chunk of another type starts a new chunk. Inclusive word indices.
  """
  for t in tags:
    if t not in ("O", "B", "I", "E", "S") and t[:2] not in ("B-", "I-", "E-", "S-"):
      raise ValueError(f"Invalid tag {t!r}: expected O or a B-/I-/E-/S- prefix.")
  prev_tag, prev_type, begin, chunks = "O", "", 0, []
  for i, t in enumerate(list(tags) + ["O"]):
    tag, type_ = _split_tag(t)
    if _ends(prev_tag, tag, prev_type, type_):
      chunks.append((prev_type, begin, i - 1))
    if _starts(prev_tag, tag, prev_type, type_):
      begin = i
    prev_tag, prev_type = tag, type_
  return chunks


def get_entities_strict(tags: Sequence[str]) -> list[tuple[str, int, int]]:
  """Chunks (type, first, last) as seqeval's strict IOB2 mode reads them.

  A chunk is a B-X followed by the longest run of I-X; nothing else is one. An I- tag
  that does not continue such a run (after O, or after a chunk of another type) is
  dropped, not repaired, so a model that emits ill-formed sequences is not credited
  for them. The type is the text after the prefix with dashes stripped ('B' -> '_').
  E-/S- tags are not IOB2 and raise, as in seqeval.
  """
  parsed = []
  for t in tags:
    if t[:1] not in ("O", "B", "I"):
      raise ValueError(f"Invalid tag {t!r} for the strict IOB2 mode: expected O, B-X or "
                       "I-X (IOBES and other schemes only in the default mode).")
    parsed.append((t[0], t[1:].strip("-") or "_"))
  chunks, i = [], 0
  while i < len(parsed):
    prefix, type_ = parsed[i]
    if prefix != "B":
      i += 1
      continue
    last = i
    while last + 1 < len(parsed) and parsed[last + 1] == ("I", type_):
      last += 1
    chunks.append((type_, i, last))
    i = last + 1
  return chunks


def entity_scores(gold_tags: Sequence[Sequence[str]],
                  pred_tags: Sequence[Sequence[str]], mode: str = "default") -> dict:
  """seqeval-compatible micro precision/recall/F1 over entities, plus per-type scores.

  Args:
    gold_tags, pred_tags: one list of tags per sentence, equal lengths pairwise.
      Chunks never cross sentences (seqeval joins sentences with an 'O').
    mode: "default" (seqeval's default, conlleval-like: `get_entities`) or "strict"
      (seqeval's `mode="strict", scheme=IOB2`: `get_entities_strict`).

  Returns:
    {"precision", "recall", "f1": floats (micro), "num_gold", "num_pred", "num_correct",
     "per_type": {type: {"precision", "recall", "f1", "support"}}} where per_type covers
    every type seen in gold or predictions. A ratio with a zero denominator is 0
    (seqeval's zero_division default).
  """
  if mode not in ENTITY_MODES:
    raise ValueError(f"Unknown entity mode {mode!r}: one of {ENTITY_MODES}.")
  decode = get_entities if mode == "default" else get_entities_strict
  if len(gold_tags) != len(pred_tags):
    raise ValueError(f"{len(gold_tags)} gold sentences but {len(pred_tags)} predicted.")
  gold, pred = set(), set()
  for s, (g, p) in enumerate(zip(gold_tags, pred_tags)):
    if len(g) != len(p):
      raise ValueError(f"Sentence {s}: {len(g)} gold tags but {len(p)} predicted.")
    gold.update((s,) + e for e in decode(g))
    pred.update((s,) + e for e in decode(p))

  def prf(g: set, p: set) -> dict:
    correct = len(g & p)
    precision = correct / len(p) if p else 0.0
    recall = correct / len(g) if g else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "support": len(g),
            "num_pred": len(p), "num_correct": correct}

  out = prf(gold, pred)
  types = sorted({e[1] for e in gold | pred})
  per_type = {}
  for t in types:
    scores = prf({e for e in gold if e[1] == t}, {e for e in pred if e[1] == t})
    per_type[t] = {k: scores[k] for k in ("precision", "recall", "f1", "support")}
  return {"precision": out["precision"], "recall": out["recall"], "f1": out["f1"],
          "num_gold": out["support"], "num_pred": out["num_pred"],
          "num_correct": out["num_correct"], "per_type": per_type}


# Names used by task tables (glue.py) and configs -> fn(labels, predictions).
METRIC_FNS = {
    "accuracy": accuracy,
    "f1": binary_f1,
    "macro_f1": macro_f1,
    "mcc": matthews_corrcoef,
    "pearson": pearson,
    "spearman": spearman,
}


def named_metrics(names, labels: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
  """{name: METRIC_FNS[name](labels, predictions)} for a task's metric names.

  labels / predictions: [N] label ids (argmax of the logits), or scores for regression.
  """
  return {m: METRIC_FNS[m](labels, predictions) for m in names}
