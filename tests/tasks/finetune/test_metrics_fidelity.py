"""Our GLUE and entity metrics equal the libraries they reimplement, to 1e-12.

scikit-learn (accuracy, binary F1, per-class precision/recall/F1, macro-F1, Matthews),
scipy.stats (Pearson, Spearman) and seqeval (entity precision/recall/F1, micro and per
type, in its default mode and its strict IOB2 mode) on 1,000 seeded random cases each.
The generators mix in the edge cases: ties, constant predictions, single-class labels,
perfect predictions, a class seen nowhere, empty sentences, I- tags with no B-, B-/I-
type switches. Where a reference warns (UndefinedMetricWarning, ConstantInputWarning)
the value is compared and the warning ignored.

Deliberately different conventions (each asserted below, so a change is noticed):
  * Pearson of one value: NaN; scipy raises ValueError (an eval split of one example
    should not end a run). Spearman of one value is NaN in both.
  * A malformed tag ("PER", "X-PER") raises ValueError; seqeval's default mode only
    warns and reads its first letter as the prefix.
"""
import warnings

import numpy as np
import pytest
import scipy.stats
import sklearn
from seqeval import metrics as seqeval_metrics
from seqeval.scheme import IOB2
from sklearn import metrics as skm

from bert_jax.tasks.finetune import metrics as M

CASES = 1000
TOL = 1e-12


@pytest.fixture(autouse=True)
def _quiet_references():
  """The references warn on ill-defined ratios; the values are what is compared. Their
  argument validation is skipped: it changes no value and is most of their run time."""
  with warnings.catch_warnings(), sklearn.config_context(skip_parameter_validation=True):
    warnings.simplefilter("ignore")
    yield


def close(ours, ref) -> bool:
  ours, ref = float(ours), float(ref)
  return (np.isnan(ours) and np.isnan(ref)) or abs(ours - ref) <= TOL


# ------------------------------------------------------------------- classification
def classification_cases(seed: int, num_classes=lambda i, rng: 2):
  """(labels, predictions, num_classes) [n] int arrays; edge cases in turn."""
  rng = np.random.default_rng(seed)
  for i in range(CASES):
    k = num_classes(i, rng)
    n = int(rng.integers(1, 40))
    labels = rng.integers(0, k, n)
    noisy = np.where(rng.random(n) < 0.6, labels, rng.integers(0, k, n))
    kind = i % 6
    if kind == 1:  # constant predictions
      preds = np.full(n, rng.integers(0, k))
    elif kind == 2:  # a single gold class
      labels = np.full(n, rng.integers(0, k))
      preds = np.where(rng.random(n) < 0.5, labels, rng.integers(0, k, n))
    elif kind == 3:  # perfect
      preds = labels.copy()
    elif kind == 4:  # both constant (the same or another class)
      labels, preds = np.full(n, rng.integers(0, k)), np.full(n, rng.integers(0, k))
    else:
      preds = noisy
    yield labels, preds, k


def multiclass(i, rng):
  return int(rng.integers(3, 6))


def sklearn_per_class(cases):
  """sklearn's per-class (precision, recall, F1, support) of every case, in one call.

  One sklearn call costs milliseconds of input checks, so the per-class references of
  all cases come from a single call: case c's class j becomes label c * K + j. The
  label sets are disjoint, so every label's tp / fp / fn are exactly those of its
  class in its case, and sklearn computes its scores from those counts alone.
  Returns [(p, r, f, s) with [k] arrays] in case order.
  """
  big = max(k for _, _, k in cases)
  labels = np.concatenate([y + c * big for c, (y, _, _) in enumerate(cases)])
  preds = np.concatenate([p + c * big for c, (_, p, _) in enumerate(cases)])
  names = [c * big + j for c, (_, _, k) in enumerate(cases) for j in range(k)]
  p, r, f, s = skm.precision_recall_fscore_support(labels, preds, labels=names,
                                                   zero_division=0)
  bounds = np.cumsum([0] + [k for _, _, k in cases])
  return [(p[a:b], r[a:b], f[a:b], s[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def test_accuracy_and_binary_f1_equal_sklearn():
  cases = list(classification_cases(1))
  for (labels, preds, _), (_, _, f, _) in zip(cases, sklearn_per_class(cases)):
    assert close(M.accuracy(labels, preds), skm.accuracy_score(labels, preds))
    # sklearn's binary F1 (average="binary", pos_label=1: MRPC, QQP) is the per-class F1
    # of label 1 (labels=[pos_label]), with 0 when it is neither gold nor predicted.
    assert close(M.binary_f1(labels, preds), f[1]), (labels, preds)
  # ... as the direct call says on a few of them.
  for labels, preds, _ in cases[:50]:
    assert close(M.binary_f1(labels, preds), skm.f1_score(labels, preds)), (labels, preds)


def test_mcc_equals_sklearn():
  for labels, preds, _ in classification_cases(
      2, lambda i, rng: 2 if i % 2 else multiclass(i, rng)):
    assert close(M.matthews_corrcoef(labels, preds), skm.matthews_corrcoef(labels, preds)), \
        (labels, preds)


def test_per_class_scores_and_macro_f1_equal_sklearn():
  cases = list(classification_cases(3, multiclass))
  for (labels, preds, k), (p, r, f, s) in zip(cases, sklearn_per_class(cases)):
    # Every class of range(k), those seen nowhere included: 0 in both (zero_division=0).
    ours = M.precision_recall_f1(labels, preds, range(k))
    np.testing.assert_allclose(ours["precision"], p, rtol=0, atol=TOL)
    np.testing.assert_allclose(ours["recall"], r, rtol=0, atol=TOL)
    np.testing.assert_allclose(ours["f1"], f, rtol=0, atol=TOL)
    np.testing.assert_array_equal(ours["support"], s)
    # Macro over the classes seen (both default to the sorted union).
    assert close(M.macro_f1(labels, preds), skm.f1_score(labels, preds, average="macro"))


# ----------------------------------------------------------------------- regression
def regression_cases(seed: int):
  """(labels, predictions) [n >= 2] float arrays with ties; constant inputs in turn."""
  rng = np.random.default_rng(seed)
  for i in range(CASES):
    n = int(rng.integers(2, 40))
    labels = rng.integers(0, 11, n) / 2.0  # STS-B-like 0..5 in halves: many ties
    preds = np.round(labels + rng.normal(0, 1.2, n), 1)  # ties too
    if i % 5 == 1:
      preds = np.full(n, 0.1)  # constant, and 0.1 has no exact mean: scipy's test
    elif i % 5 == 2:
      labels = np.full(n, rng.integers(0, 6) / 2.0)
    elif i % 5 == 3:
      preds = rng.normal(2.5, 1.0, n)  # no ties
    yield labels, preds


def test_pearson_and_spearman_equal_scipy():
  for labels, preds in regression_cases(4):
    assert close(M.pearson(labels, preds), scipy.stats.pearsonr(labels, preds)[0]), \
        (labels, preds)
    assert close(M.spearman(labels, preds), scipy.stats.spearmanr(labels, preds)[0]), \
        (labels, preds)
  nan = [1.0, np.nan, 2.0]
  assert np.isnan(M.spearman(nan, [1.0, 2.0, 3.0]))
  assert np.isnan(scipy.stats.spearmanr(nan, [1.0, 2.0, 3.0])[0])


def test_one_value_correlations_are_nan_where_scipy_pearson_raises():
  assert np.isnan(M.spearman([1.0], [2.0])) and np.isnan(scipy.stats.spearmanr([1.0], [2.0])[0])
  assert np.isnan(M.pearson([1.0], [2.0]))  # deliberate: NaN, not an exception
  with pytest.raises(ValueError, match="at least 2"):
    scipy.stats.pearsonr([1.0], [2.0])


# ------------------------------------------------------------------------- entities
TYPES = ("PER", "LOC", "ORG")


def tag_corpora(seed: int, prefixes: str):
  """(gold, pred): 1-4 sentences of 0-12 random tags each, pred a mutation of gold.

  Random tags give I- tags after O (ill-formed starts) and B-X I-Y type switches; the
  mutations (a tag replaced by a random one) give near misses of every kind.
  """
  rng = np.random.default_rng(seed)
  weights = {"O": 4, "B": 2, "I": 2, "E": 1, "S": 1}
  p = np.array([weights[c] for c in prefixes], dtype=np.float64)
  p /= p.sum()

  def tag():
    prefix = prefixes[rng.choice(len(prefixes), p=p)]
    return "O" if prefix == "O" else f"{prefix}-{TYPES[rng.integers(len(TYPES))]}"

  for _ in range(CASES):
    gold, pred = [], []
    for _ in range(int(rng.integers(1, 5))):
      g = [tag() for _ in range(int(rng.integers(0, 13)))]
      pred.append([tag() if rng.random() < 0.25 else t for t in g])
      gold.append(g)
    yield gold, pred


def assert_equals_seqeval(gold, pred, mode):
  kwargs = {"mode": "strict", "scheme": IOB2} if mode == "strict" else {}
  ours = M.entity_scores(gold, pred, mode=mode)
  report = seqeval_metrics.classification_report(gold, pred, output_dict=True, **kwargs)
  micro = report.pop("micro avg")
  where = (mode, gold, pred)
  assert close(ours["precision"], micro["precision"]), where
  assert close(ours["recall"], micro["recall"]), where
  assert close(ours["f1"], micro["f1-score"]), where
  assert ours["num_gold"] == micro["support"], where
  per_type = {t: s for t, s in report.items() if t not in ("macro avg", "weighted avg")}
  assert sorted(ours["per_type"]) == sorted(per_type), where
  for t, s in per_type.items():
    o = ours["per_type"][t]
    assert close(o["precision"], s["precision"]) and close(o["recall"], s["recall"]), where
    assert close(o["f1"], s["f1-score"]) and o["support"] == s["support"], where


@pytest.mark.parametrize("mode", ["default", "strict"])
def test_entity_scores_equal_seqeval_on_iob2_tags(mode):
  for gold, pred in tag_corpora(5 if mode == "default" else 6, "OBI"):
    assert_equals_seqeval(gold, pred, mode)


def test_default_mode_equals_seqeval_on_iobes_tags():
  for gold, pred in tag_corpora(7, "OBIES"):
    assert_equals_seqeval(gold, pred, "default")


def test_strict_and_default_modes_differ_where_seqeval_says():
  gold = [["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]]
  # An I- start and a B-/I- type switch: the default mode repairs them into chunks, the
  # strict mode keeps only well-formed B-X I-X... runs.
  pred = [["I-PER", "I-PER", "O", "B-LOC", "I-ORG"]]
  default, strict = M.entity_scores(gold, pred), M.entity_scores(gold, pred, mode="strict")
  assert M.get_entities(pred[0]) == [("PER", 0, 1), ("LOC", 3, 3), ("ORG", 4, 4)]
  assert M.get_entities_strict(pred[0]) == [("LOC", 3, 3)]
  assert (default["num_correct"], default["num_pred"]) == (1, 3)  # PER 0-1 counts
  assert (strict["num_correct"], strict["num_pred"]) == (0, 1)
  # default: P = 1/3, R = 1/2, F1 = 2 (1/6) / (5/6) = 0.4; strict: nothing correct.
  assert close(default["f1"], 0.4) and close(seqeval_metrics.f1_score(gold, pred), 0.4)
  assert strict["f1"] == 0.0
  assert seqeval_metrics.f1_score(gold, pred, mode="strict", scheme=IOB2) == 0.0


def test_bad_tags_raise_where_seqeval_warns_or_raises():
  with pytest.raises(ValueError, match="Invalid tag 'PER'"):
    M.entity_scores([["PER"]], [["O"]])  # deliberate: seqeval's default mode only warns
  with pytest.raises(ValueError, match="strict IOB2"):
    M.entity_scores([["S-PER"]], [["O"]], mode="strict")
  with pytest.raises(ValueError):  # seqeval's strict IOB2 mode rejects S- as well
    seqeval_metrics.f1_score([["S-PER"]], [["O"]], mode="strict", scheme=IOB2)
  with pytest.raises(ValueError, match="Unknown entity mode 'lenient'"):
    M.entity_scores([["O"]], [["O"]], mode="lenient")
