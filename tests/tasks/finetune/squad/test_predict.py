"""SQuAD predict mode writes the official evaluation's inputs beside its JSONL.

predictions.json (qid -> answer text, "" for no answer) and null_odds.json (qid -> null
score - best span score), as google-research/bert's run_squad.py writes them for
`evaluate-v2.0.py dev.json predictions.json --na-prob-file null_odds.json`. The
weights are random, of the tiny BERT task's shapes (predict's checkpoint read is
replaced): the files' format and consistency are under test, not the answers.
"""
import json
import pathlib

import flax.linen as nn
import jax
import numpy as np
import pytest

from bert_jax.checkpoint import manager as checkpoint
from bert_jax.tasks import registry
from bert_jax.tasks.finetune import predict
from bert_jax.tasks.finetune.squad import data
from bert_jax.tasks.finetune.squad import metrics as S
from bert_jax.tasks.finetune.squad.task import V2_METRICS
from bert_jax.train.defaults import finetune_config

TESTDATA = pathlib.Path(__file__).resolve().parents[3] / "testdata"
DEV = TESTDATA / "tasks" / "squad_v2_eval" / "dev.json"


def squad_v2_task():
  c = finetune_config("squad", "file", "f1", max_seq_length=48, doc_stride=16,
                      max_query_length=16, version_2_with_negative=True,
                      train_file=str(DEV), eval_file=str(DEV))
  c.init_from = str(TESTDATA / "hf" / "tiny_bert")
  c.predict.update(input_file=str(DEV), batch_size=8)
  return c, registry.get_task(c)


@pytest.fixture(name="run_predict")
def _run_predict(monkeypatch):
  c, task = squad_v2_task()

  def random_params(path):  # the checkpoint's shapes, random values (no init compile)
    del path
    rng = np.random.default_rng(0)
    shapes = nn.unbox(jax.eval_shape(task.init, jax.random.key(0),
                                     task.dummy_batch(1, 48))["params"])
    params = jax.tree_util.tree_map(
        lambda s: (0.2 * rng.standard_normal(s.shape)).astype(s.dtype), shapes)
    return None, params, None

  monkeypatch.setattr(checkpoint, "load_params_for_inference", random_params)

  def run(output_file):
    c.predict.output_file = str(output_file)
    return predict.predict(c, str(output_file.parent), task, "step_dir")
  return run


def test_predictions_json_and_null_odds_json(run_predict, tmp_path):
  out = run_predict(tmp_path / "preds.jsonl")
  rows = {r["id"]: r["answer"] for r in map(json.loads, open(out, encoding="utf-8"))}
  preds = json.loads((tmp_path / "predictions.json").read_text(encoding="utf-8"))
  odds = json.loads((tmp_path / "null_odds.json").read_text(encoding="utf-8"))
  qids = {"h1", "h2", "h3", "h4", "n1", "n2", "n3"}
  assert set(rows) == set(preds) == set(odds) == qids
  assert preds == rows  # the same answers as the JSONL
  for q in qids:
    assert isinstance(preds[q], str) and isinstance(odds[q], float)
    # data.null_score_diff_threshold = 0.0: "" exactly when the null score wins.
    assert (preds[q] == "") == (odds[q] > 0.0), (q, preds[q], odds[q])
  # The official evaluation reads them as they are.
  gold = data.squad_gold_answers(data.read_squad_json(DEV)[0])
  scores = S.squad_v2_scores(gold, preds, na_probs=odds)
  assert scores["total"] == 7 and 0.0 <= scores["best_f1"] <= 100.0


def test_an_output_named_like_an_official_file_is_refused(run_predict, tmp_path):
  clash = tmp_path / "predictions.json"
  clash.write_text("kept")
  with pytest.raises(ValueError, match="predictions.json.*choose another name"):
    run_predict(clash)
  assert clash.read_text() == "kept" and not (tmp_path / "null_odds.json").exists()


def test_v2_evaluation_reports_the_official_scores_of_those_files(tmp_path):
  """host_metrics = the official v2.0 evaluation of the files predict mode would write
  for the same outputs, with --na-prob-thresh = data.null_score_diff_threshold."""
  _, task = squad_v2_task()
  task.prepare(str(tmp_path))
  n, length = task.eval_features["input_ids"].shape
  rng = np.random.default_rng(0)
  start = rng.normal(size=(n, length)).astype(np.float32)  # [F, L]
  end = rng.normal(size=(n, length)).astype(np.float32)  # [F, L]
  # The null answer ([CLS], position 0) wins on the unanswerable questions' windows.
  qids = [task.eval_examples[e].qid for e in task.eval_features["example_index"]]
  start[:, 0] += np.where([q.startswith("n") for q in qids], 10.0, -10.0)
  outputs = {"feature_index": np.arange(n, dtype=np.int32),  # [F]
             "start_logits": start, "end_logits": end}
  got = task.host_metrics(outputs)
  files = task.official_prediction_files(task.eval_examples, task.eval_features, outputs)
  texts = files["predictions.json"]
  assert {q for q, t in texts.items() if t == ""} == {"n1", "n2", "n3"}
  want = S.squad_v2_scores(data.squad_gold_answers(task.eval_examples),
                           files["predictions.json"], na_probs=files["null_odds.json"],
                           na_prob_thresh=0.0)
  assert want["total"] == 7 and set(V2_METRICS) <= set(want)
  assert got == {"exact_match": want["exact"], "f1": want["f1"],
                 **{k: want[k] for k in V2_METRICS}}
