"""SGNS model: init as gensim, logical names, loss and row gradients against numpy."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from bert_jax.word2vec import model as w2v


def np_sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def np_sgns(t, c, weights):
  """Hand-written SGNS in float64: loss [b] and its analytic gradients wrt t and c rows.

  loss = -log s(t.c0) - sum_j log s(-t.cj);  dL/dt = sum_j (s(t.cj) - y_j) cj,
  dL/dcj = (s(t.cj) - y_j) t, with y = (1, 0, ..., 0).
  """
  t, c = t.astype(np.float64), c.astype(np.float64)
  logits = np.einsum("bd,bkd->bk", t, c)
  y = np.zeros_like(logits)
  y[:, 0] = 1
  loss = -(np.log(np_sigmoid(logits[:, 0])) + np.log(np_sigmoid(-logits[:, 1:])).sum(1))
  g = (np_sigmoid(logits) - y) * weights[:, None]
  return loss * weights, np.einsum("bk,bkd->bd", g, c), g[:, :, None] * t[:, None, :]


def init_params(**kwargs):
  model = w2v.SkipGram(vocab_size=500, embed_dim=40, **kwargs)
  ids = jnp.zeros((1,), jnp.int32)
  return jax.jit(model.init)(jax.random.key(0), ids, ids[:, None])["params"]


def test_init_like_gensim_4_and_logical_names():
  from gensim.models.keyedvectors import prep_vectors
  boxed = init_params()
  assert nn.get_partition_spec(boxed)["target"] == jax.sharding.PartitionSpec("vocab", "embed")
  assert nn.get_partition_spec(boxed)["context"] == jax.sharding.PartitionSpec("vocab", "embed")
  params = nn.unbox(boxed)
  t = np.asarray(params["target"])
  assert t.shape == (500, 40) and t.dtype == np.float32
  # gensim 4: uniform [-1/d, 1/d): bounds, mean 0 and variance (2/d)^2 / 12.
  assert np.abs(t).max() <= 1 / 40 and np.abs(t).max() > 0.99 / 40
  np.testing.assert_allclose(t.var(), (2 / 40) ** 2 / 12, rtol=0.05)
  assert np.abs(t.mean()) < 2e-4
  assert not np.asarray(params["context"]).any()
  # The same distribution as gensim 4.4's own KeyedVectors.prep_vectors (two-sample KS),
  # and not that of word2vec.c's half-width.
  gensim = prep_vectors((500, 40), seed=3)
  assert gensim.dtype == np.float32 and np.abs(gensim).max() <= 1 / 40
  assert stats.ks_2samp(t.ravel(), gensim.ravel()).pvalue > 1e-3
  assert stats.ks_2samp(t.ravel() / 2, gensim.ravel()).pvalue < 1e-6


def test_init_scale_of_word2vec_c_and_bad_scales():
  t = np.asarray(nn.unbox(init_params(init_scale=w2v.WORD2VEC_C_INIT_SCALE))["target"])
  # word2vec.c: (u - 0.5) / d, uniform [-0.5/d, 0.5/d): variance (1/d)^2 / 12.
  assert np.abs(t).max() <= 0.5 / 40 and np.abs(t).max() > 0.49 / 40
  np.testing.assert_allclose(t.var(), (1 / 40) ** 2 / 12, rtol=0.05)
  ref = (np.random.default_rng(0).random((500, 40)) - 0.5) / 40
  assert stats.ks_2samp(t.ravel(), ref.ravel()).pvalue > 1e-3
  for bad in (0.0, -1.0, float("nan")):
    with pytest.raises(ValueError, match="model.init_scale must be > 0"):
      init_params(init_scale=bad)


def test_loss_and_row_grads_match_numpy_and_autodiff():
  rng = np.random.default_rng(0)
  b, k, d = 6, 4, 8
  t = rng.normal(size=(b, d)).astype(np.float32)
  c = rng.normal(size=(b, k + 1, d)).astype(np.float32)
  weights = np.array([1, 1, 1, 1, 1, 0], np.float32)   # the last pair is padding
  loss, gt, gc = jax.jit(w2v.row_grads)(t, c, weights)
  ref_loss, ref_gt, ref_gc = np_sgns(t, c, weights)
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(gt, ref_gt, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(gc, ref_gc, rtol=1e-5, atol=1e-6)
  assert loss[-1] == 0 and not np.asarray(gt[-1]).any() and not np.asarray(gc[-1]).any()
  # The same gradients by autodiff of the summed loss with respect to the gathered rows.
  auto_t, auto_c = jax.jit(jax.grad(
      lambda t, c: jnp.sum(w2v.sgns_loss(w2v.pair_logits(t, c), jnp.asarray(weights))),
      argnums=(0, 1)))(t, c)
  np.testing.assert_allclose(auto_t, gt, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(auto_c, gc, rtol=1e-5, atol=1e-6)


def test_module_scores_the_gathered_rows():
  model = w2v.SkipGram(vocab_size=20, embed_dim=6)
  centers = jnp.array([3, 3, 7])
  cands = jnp.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
  params = nn.unbox(jax.jit(model.init)(jax.random.key(1), centers, cands)["params"])
  params = dict(params, context=np.random.default_rng(2).normal(size=(20, 6)).astype(np.float32))
  logits = jax.jit(model.apply)({"params": params}, centers, cands)
  t, c = np.asarray(params["target"]), np.asarray(params["context"])
  expected = np.einsum("bd,bkd->bk", t[np.asarray(centers)], c[np.asarray(cands)])
  np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-7)
  # Large logits stay finite (softplus form of the BCE).
  big = jax.jit(w2v.sgns_loss)(np.array([[-100.0, 100.0]], np.float32), np.ones(1, np.float32))
  np.testing.assert_allclose(big, [200.0], rtol=1e-6)
