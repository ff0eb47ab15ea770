"""SQuAD in length buckets equals the padded path: logits, official EM/F1, gradients.

The committed tiny HF BERT (2 layers, 32 wide, a 122-token vocabulary: a word is several
tokens) on 12 questions about contexts of 1 to 12 words, 64-token windows, stride 24:
buckets of 32 tokens run the short windows at 32 positions where the padded path runs
all of them at 64.
"""
import functools
import json
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.tasks import registry
from bert_jax.train import steps
from bert_jax.train.defaults import finetune_config

TESTDATA = pathlib.Path(__file__).resolve().parents[3] / "testdata"
WORDS = ("Shanghai is a City in China, it is also a financial center, its fashion capital "
         "and industrial city.").split()


def _squad_file(tmp_path) -> str:
  """12 questions on contexts of 1..12 words, the answer the whole context (so any
  predicted span scores some F1)."""
  path = tmp_path / "qa.json"
  if not path.exists():
    paragraphs = [{"context": " ".join(WORDS[:n]), "qas": [
        {"id": f"q{n}", "question": "Which city?" if n % 2 else "What?",
         "answers": [{"text": " ".join(WORDS[:n]), "answer_start": 0}]}]}
        for n in range(1, 13)]
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": paragraphs}]}))
  return str(path)


def _task(length_bucket, tmp_path):
  data = _squad_file(tmp_path)
  c = finetune_config("squad", "file", "f1", max_seq_length=64, doc_stride=24,
                      max_query_length=16, train_file=data, eval_file=data,
                      length_bucket=length_bucket)
  c.init_from = str(TESTDATA / "hf" / "tiny_bert")
  task = registry.get_task(c)
  task.prepare(str(tmp_path / f"b{length_bucket}"))
  return task


@pytest.fixture(name="tasks", scope="module")
def _tasks(tmp_path_factory):
  """(bucketed task, padded task, params): the pretrained tiny encoder and a random span
  head, scaled up so the answers vary (no init compile: shapes from eval_shape)."""
  tmp = tmp_path_factory.mktemp("squad_buckets")
  bucketed, padded = _task(32, tmp), _task(0, tmp)
  shapes = nn.unbox(jax.eval_shape(padded.init, jax.random.key(0),
                                   padded.dummy_batch(1, 64))["params"])
  rng = np.random.default_rng(0)
  template = jax.tree_util.tree_map(
      lambda x: (3.0 * rng.standard_normal(x.shape)).astype(x.dtype), shapes)
  return bucketed, padded, padded.load_pretrained_params(padded.config.init_from, template)


def test_bucketed_eval_equals_the_padded_path(tasks):
  bucketed, padded, params = tasks
  assert bucketed.bucket_lengths.tolist() == [32, 64] and not padded.bucketed
  predict = jax.jit(functools.partial(steps.predict_step, task=bucketed))

  def outputs(task):
    batches = list(task.eval_iterator({}, 4, 0, 1))
    got = [jax.device_get(predict(params, b)) for b in batches]
    shapes = {b["input_ids"].shape[1] for b in batches}
    return task.ordered({k: np.concatenate([o[k] for o in got]) for k in got[0]}), shapes

  (ours, ours_shapes), (ref, ref_shapes) = outputs(bucketed), outputs(padded)
  assert ref_shapes == {64} and ours_shapes == {32, 64}
  np.testing.assert_array_equal(ours["feature_index"], ref["feature_index"])
  real = bucketed.eval_features["input_mask"] > 0                   # [F, 64]
  for k in ("start_logits", "end_logits"):
    np.testing.assert_allclose(ours[k][real], ref[k][real], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ours[k][~real], ref[k][~real])   # the padding logit
  ref_metrics = padded.host_metrics(ref)
  assert bucketed.host_metrics(ours) == ref_metrics                # the official EM/F1
  assert bucketed.answers(bucketed.eval_examples, bucketed.eval_features, ours).texts == \
      padded.answers(padded.eval_examples, padded.eval_features, ref).texts
  assert 0.0 < ref_metrics["f1"] < 100.0                           # answers vary


def test_a_bucketed_train_batch_has_the_padded_batch_gradients(tasks):
  task, _, params = tasks
  batch = next(task.train_iterator({}, 8, 0, 1, seed=0))
  length = batch["input_ids"].shape[1]
  assert length < 64
  padded = {k: (np.pad(v, ((0, 0), (0, 64 - length))) if v.ndim == 2 else v)
            for k, v in batch.items()}

  @jax.jit
  def grads(params, batch):
    def loss(p):  # the deterministic model: dropout masks would depend on the shape
      out = task.apply(p, batch, None, train=False)
      return task.loss_parts(out, batch)["task"] / jnp.sum(task.row_weights(batch))
    return jax.value_and_grad(loss)(params)

  (l1, g1), (l2, g2) = grads(params, batch), grads(params, padded)
  np.testing.assert_allclose(l1, l2, rtol=1e-5)
  for a, b in zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g2)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
