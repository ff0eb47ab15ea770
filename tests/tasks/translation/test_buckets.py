"""Translation eval and translate in length buckets equal the padded path: teacher-forced
loss and accuracy, greedy and beam hypotheses, sacreBLEU / chrF, the caller's order.

The tiny numbers Transformer with random weights (hypotheses that vary), on 15
validation pairs in batches of 8 (one padding row): sources up to 16 subwords, targets up
to 20, buckets of 4. Hypotheses stop at source length + 3 tokens, so a bucket decodes
its own shorter buffer (S' + 3 < 19) and the per-row limits are what the padded path's
would be. Compiles: two shapes bucketed, one padded, two for the translate CLI's search.
"""
import functools

import flax.linen as nn
import jax
import numpy as np
import pytest

from bert_jax import translate
from bert_jax.data import buckets
from bert_jax.tasks import registry
from bert_jax.tasks.translation import data
from bert_jax.train import steps
from tests.tasks.translation.conftest import translation_config

N, BATCH = 15, 8  # eval pairs, rows a batch


def _task(length_bucket, workdir):
  c = translation_config()
  c.data.update(max_source_length=16, max_eval_examples=N, length_bucket=length_bucket)
  c.decode.update(eval_beam_size=2, max_extra_length=3)
  task = registry.get_task(c)
  task.prepare(str(workdir))  # reuses the workdir's vocabulary
  return task


def _random(path, x, rng):
  """A param of varied hypotheses: biases 0, norm scales 1, kernels ~ N(0, 1 / dim 0),
  the shared embedding ~ N(0, 1) (random biases of this size make every row one token)."""
  name = path[-1].key
  if name in ("bias", "scale"):
    return np.full(x.shape, float(name == "scale"), x.dtype)
  std = 1.0 if name == "embedding" else x.shape[0] ** -0.5
  return (std * rng.standard_normal(x.shape)).astype(x.dtype)


@pytest.fixture(name="tasks", scope="module")
def _tasks(numbers_workdir):
  """(bucketed task, padded task, random params): no init compile (eval_shape)."""
  workdir, _ = numbers_workdir
  bucketed, padded = _task(4, workdir), _task(0, workdir)
  shapes = nn.unbox(jax.eval_shape(padded.init, jax.random.key(0), padded.dummy_batch(1)))
  rng = np.random.default_rng(0)
  params = jax.tree_util.tree_map_with_path(lambda p, x: _random(p, x, rng),
                                            shapes["params"])
  return bucketed, padded, params


def _eval(task, params):
  """(every row's outputs in feature order, the batches' (S, T) shapes): beam 2 (the
  config's eval search) and greedy, as the loop's predict_step gathers them."""
  @jax.jit
  def run(params, batch):
    out = steps.predict_step(params, batch, task=task)
    out["greedy"] = task.search(params, batch["src_ids"], beam_size=1)
    return out

  batches = list(task.eval_iterator({}, BATCH, 0, 1))
  got = [jax.device_get(run(params, b)) for b in batches]
  outputs = {k: np.concatenate([o[k] for o in got]) for k in got[0]}
  keep = outputs["feature_index"] >= 0
  order = np.argsort(outputs["feature_index"][keep])
  rows = {k: v[keep][order] for k, v in outputs.items()}
  return rows, {(b["src_ids"].shape[1], b["tgt_ids"].shape[1]) for b in batches}


def test_bucketed_eval_and_translate_equal_the_padded_path(tasks, tmp_path):
  bucketed, padded, params = tasks
  assert bucketed.source_buckets.tolist() == [4, 8, 12, 16] and not padded.bucketed
  (ours, our_shapes), (ref, ref_shapes) = _eval(bucketed, params), _eval(padded, params)
  assert ref_shapes == {(16, 20)}
  assert len(our_shapes) >= 2 and {s for s, _ in our_shapes} <= {4, 8, 12, 16} and \
      {t for _, t in our_shapes} <= {4, 8, 12, 16, 20}
  np.testing.assert_array_equal(ours["feature_index"], np.arange(N))
  for k in ("nll", "correct", "tokens"):
    np.testing.assert_allclose(ours[k], ref[k], rtol=1e-5, atol=1e-5)
  for k in ("hyp", "greedy"):
    np.testing.assert_array_equal(ours[k], ref[k])
  # Every hypothesis stopped at </s> or at its row's limit, min(20, source length + 3).
  src_len = (bucketed.eval_source.src_ids > 0).sum(1)
  hyp_len = (ref["hyp"] > 0).sum(1)
  assert ((hyp_len == src_len + 3) | np.any(ref["hyp"] == data.EOS, axis=1)).all()
  assert len({tuple(h) for h in ref["greedy"]}) >= 12         # the hypotheses vary
  for hyp in ("hyp", "greedy"):  # sacreBLEU, chrF, exact match, token accuracy
    got = bucketed.host_metrics({**ours, "hyp": ours[hyp]})
    want = padded.host_metrics({**ref, "hyp": ref[hyp]})
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    for k in ("bleu", "chrf", "exact_match"):
      assert got[k] == want[k], k
  assert bucketed.host_metrics(ours)["chrf"] > 0.0

  # The translate CLI: bucketed batches, lines written in the input's order.
  lines = tmp_path / "eval.src"
  lines.write_text("".join(s + "\n" for s in bucketed.eval_source.sources), encoding="utf-8")
  texts, _ = translate.translate(bucketed, params, str(lines), 1, 0.6, BATCH)
  assert texts == data.decode(bucketed.tokenizer, ref["greedy"])  # the padded path's

  # Fewer computed positions (source + target) than the padded path's 16 x (16 + 20).
  plan = buckets.eval_plan(
      np.stack([src_len, (bucketed.eval_source.tgt_ids > 0).sum(1)], 1),
      (bucketed.source_buckets, bucketed.target_buckets), BATCH)
  assert BATCH * plan.lengths.sum() < 16 * (16 + 20)
