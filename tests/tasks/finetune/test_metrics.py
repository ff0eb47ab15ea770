"""Metrics against hand-computed values and scipy.stats."""
import numpy as np
import pytest
import scipy.stats

from bert_jax.tasks.finetune.classification import glue
from bert_jax.tasks.finetune import metrics as M
from bert_jax.tasks.finetune.squad import metrics as S


# ------------------------------------------------------------------- classification
def test_accuracy_and_binary_f1():
  labels = [0, 1, 1, 0, 1]
  preds = [0, 1, 0, 0, 0]
  assert M.accuracy(labels, preds) == pytest.approx(3 / 5)
  # tp=1 (idx 1), fp=0, fn=2 (idx 2, 4): F1 = 2 / (2 + 0 + 2)
  assert M.binary_f1(labels, preds) == pytest.approx(0.5)
  assert M.binary_f1([0, 0], [0, 0]) == 0.0  # no positives anywhere: 0, not NaN


def test_per_class_prf_and_macro_f1():
  labels = [0, 0, 0, 1, 1, 2]
  preds = [0, 0, 1, 1, 2, 2]
  r = M.precision_recall_f1(labels, preds)
  # class 0: tp 2 of 2 predicted, 3 gold; class 1: tp 1 of 2/2; class 2: tp 1 of 2/1.
  np.testing.assert_allclose(r["precision"], [1.0, 0.5, 0.5])
  np.testing.assert_allclose(r["recall"], [2 / 3, 0.5, 1.0])
  np.testing.assert_allclose(r["f1"], [0.8, 0.5, 2 / 3])
  np.testing.assert_array_equal(r["support"], [3, 2, 1])
  assert M.macro_f1(labels, preds) == pytest.approx((0.8 + 0.5 + 2 / 3) / 3)
  # A class seen nowhere still counts (with F1 0) when the classes are given.
  assert M.macro_f1(labels, preds, classes=range(4)) == pytest.approx((0.8 + 0.5 + 2 / 3) / 4)


def test_mcc_binary_by_hand_and_degenerate():
  labels = [1, 1, 1, 1, 0, 0, 0, 0]
  preds = [1, 1, 1, 0, 0, 0, 1, 1]  # tp 3, fn 1, tn 2, fp 2
  expected = (3 * 2 - 2 * 1) / np.sqrt((3 + 2) * (3 + 1) * (2 + 2) * (2 + 1))
  assert M.matthews_corrcoef(labels, preds) == pytest.approx(expected)
  assert M.matthews_corrcoef(labels, [1] * 8) == 0.0  # constant predictions
  assert M.matthews_corrcoef(labels, labels) == pytest.approx(1.0)


def test_mcc_multiclass_equals_one_hot_covariance_ratio():
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 3, 50)
  preds = np.where(rng.random(50) < 0.6, labels, rng.integers(0, 3, 50))
  x, y = np.eye(3)[labels], np.eye(3)[preds]  # Gorodkin's R_K on one-hot vectors

  def cov(a, b):
    return np.sum((a - a.mean(0)) * (b - b.mean(0)))

  expected = cov(x, y) / np.sqrt(cov(x, x) * cov(y, y))
  assert M.matthews_corrcoef(labels, preds) == pytest.approx(expected)


def test_pearson_spearman_match_scipy_with_ties():
  labels = np.array([0.0, 1.0, 1.0, 2.5, 3.0, 4.0, 4.0, 5.0])
  preds = np.array([0.3, 0.9, 1.7, 1.7, 3.3, 3.1, 4.8, 4.2])
  assert M.pearson(labels, preds) == pytest.approx(scipy.stats.pearsonr(labels, preds)[0])
  assert M.spearman(labels, preds) == pytest.approx(scipy.stats.spearmanr(labels, preds)[0])
  assert np.isnan(M.pearson(labels, np.ones(8)))


def test_glue_metrics_use_the_official_metric_per_task():
  def glue_metrics(task, labels, predictions):  # as ClassificationTask.host_metrics calls it
    return M.named_metrics(glue.get_glue_task(task).metrics, np.asarray(labels),
                           np.asarray(predictions))
  assert glue_metrics("cola", [1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 1, 1]) == {
      "mcc": pytest.approx(4 / np.sqrt(240))}
  assert glue_metrics("mrpc", [0, 1, 1, 0, 1], [0, 1, 0, 0, 0]) == {
      "f1": pytest.approx(0.5), "accuracy": pytest.approx(0.6)}
  out = glue_metrics("stsb", [0.0, 2.0, 4.0], [0.0, 1.0, 4.0])
  assert set(out) == {"pearson", "spearman"} and out["spearman"] == pytest.approx(1.0)
  assert glue.get_glue_task("glue/mnli").eval_splits == (
      "validation_matched", "validation_mismatched")
  assert glue.get_glue_task("stsb").num_labels == 1
  assert set(glue.GLUE_TASKS) == {"cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli",
                                  "rte", "wnli"}


# ------------------------------------------------------------------------- entities
def test_entities_three_gold_two_predicted_one_correct():
  gold = [["B-PER", "I-PER", "O", "B-LOC", "O", "B-ORG"]]
  pred = [["B-PER", "I-PER", "O", "O", "O", "B-LOC"]]
  r = M.entity_scores(gold, pred)
  assert (r["num_gold"], r["num_pred"], r["num_correct"]) == (3, 2, 1)
  assert r["precision"] == pytest.approx(0.5)
  assert r["recall"] == pytest.approx(1 / 3)
  assert r["f1"] == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))  # 0.4
  assert r["per_type"]["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}
  assert r["per_type"]["ORG"]["recall"] == 0.0
  assert r["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}


def test_entities_seqeval_docstring_example():
  gold = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
  pred = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
  r = M.entity_scores(gold, pred)
  assert (r["precision"], r["recall"], r["f1"]) == (0.5, 0.5, 0.5)


@pytest.mark.parametrize("tags, expected", [
    # I- without a preceding B- starts a new chunk (seqeval default / conlleval).
    (["I-PER", "I-PER", "O"], [("PER", 0, 1)]),
    (["O", "I-PER", "B-PER"], [("PER", 1, 1), ("PER", 2, 2)]),
    (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 0), ("LOC", 1, 2)]),  # type switch
    (["I-PER", "I-PER", "B-PER", "O", "I-LOC"], [("PER", 0, 1), ("PER", 2, 2), ("LOC", 4, 4)]),
    (["S-PER", "O", "B-LOC", "I-LOC", "E-LOC", "E-LOC"], [("PER", 0, 0), ("LOC", 2, 4),
                                                        ("LOC", 5, 5)]),  # IOBES
    (["B", "I", "O", "B"], [("_", 0, 1), ("_", 3, 3)]),  # untyped tags
])
def test_get_entities_lenient_decoding(tags, expected):
  assert M.get_entities(tags) == expected


def test_entities_do_not_cross_sentences_and_bad_tags_raise():
  r = M.entity_scores([["O", "B-PER"], ["I-PER", "O"]], [["O", "B-PER"], ["I-PER", "O"]])
  assert r["num_gold"] == 2
  with pytest.raises(ValueError, match="Invalid tag"):
    M.get_entities(["PER"])
  with pytest.raises(ValueError, match="2 gold tags but 1"):
    M.entity_scores([["O", "O"]], [["O"]])


# ---------------------------------------------------------------------------- SQuAD
def test_normalize_answer_and_token_f1():
  assert S.normalize_answer("The  Quick, brown FOX!") == "quick brown fox"
  assert S.normalize_answer("an apple a day") == "apple day"
  # pred [in, city, of, paris] vs gold [paris, city]: P = 2/4, R = 2/2
  assert S.token_f1("Paris city", "in the city of Paris") == pytest.approx(2 * 0.5 / 1.5)
  assert S.token_f1("", "") == 0.0  # v1.1: no common token
  assert S.token_f1("", "", version_2=True) == 1.0  # v2.0: both no-answer
  assert S.token_f1("Paris", "", version_2=True) == 0.0


def test_squad_v1_max_over_gold_and_missing_counts_zero():
  gold = {"q1": ["Eiffel Tower", "the tower"], "q2": ["Paris city"], "q3": ["x"]}
  preds = {"q1": "the Eiffel tower.", "q2": "in the city of Paris"}
  r = S.squad_v1_scores(gold, preds)
  assert r["exact_match"] == pytest.approx(100 * 1 / 3)
  assert r["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
  assert (r["total"], r["missing"]) == (3, 1)


def test_squad_v2_no_answer_semantics_and_threshold():
  gold = {"q1": ["Paris"], "q2": [], "q3": [""], "q4": ["Rome"], "q5": []}
  preds = {"q1": "paris", "q2": "", "q3": "something", "q4": "", "q5": "Lyon"}
  r = S.squad_v2_scores(gold, preds)
  # q1 and q2 right: 2 of 5. q3's only gold text is blank, so "" would be its only
  # correct answer; it still has an answer list, which is what HasAns means officially.
  assert r["exact"] == pytest.approx(40.0) and r["f1"] == pytest.approx(40.0)
  assert (r["HasAns_total"], r["HasAns_exact"]) == (3, pytest.approx(100 / 3))
  assert (r["NoAns_total"], r["NoAns_exact"]) == (2, pytest.approx(50.0))
  # A no-answer probability above the threshold scores q5 as if predicted "".
  na = {"q1": 0.1, "q2": 0.1, "q3": 0.1, "q4": 0.1, "q5": 0.9}
  r = S.squad_v2_scores(gold, preds, na_probs=na, na_prob_thresh=0.5)
  assert r["exact"] == pytest.approx(60.0)
