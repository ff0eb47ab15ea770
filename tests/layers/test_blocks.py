"""layers/blocks.py: the exact GELU against its definition in float64 (stdlib erfc),
values and gradients, what its backward keeps, and FeedForward's activation."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.layers import blocks
from bert_jax.layers.config import TransformerConfig


def _reference(x):
  """GELU(x) = x Phi(x) and its derivative Phi(x) + x phi(x), in float64."""
  x = np.asarray(x, np.float64)
  cdf = 0.5 * np.vectorize(math.erfc)(-x / math.sqrt(2.0))
  pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
  return x * cdf, cdf + x * pdf


def test_the_exact_gelu_matches_the_definition():
  f = blocks.ACTIVATIONS["gelu"]
  x = jnp.linspace(-10.0, 10.0, 20001, dtype=jnp.float32)
  value, grad = _reference(x)
  np.testing.assert_allclose(f(x), value, rtol=0, atol=1.1e-6)
  np.testing.assert_allclose(jax.vmap(jax.grad(f))(x), grad, rtol=0, atol=2e-6)
  # Not the tanh approximation (which is off by up to ~5e-4 here).
  assert float(jnp.abs(jax.nn.gelu(x, approximate=True) - value).max()) > 1e-4


def test_gelu_keeps_bfloat16():
  x = jnp.linspace(-4.0, 4.0, 101, dtype=jnp.bfloat16)
  y = blocks.ACTIVATIONS["gelu"](x)
  assert y.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(y, np.float32), _reference(np.asarray(x, np.float32))[0],
                             rtol=2e-2, atol=2e-2)


def test_gelu_backward_keeps_only_its_input():
  """The FFN's widest activation: its linearization keeps x alone for the backward (jax's
  erfc form keeps three [.., d_mlp] arrays), which is what cut BERT-base's step on v5e
  (bench/RESULTS.md "TPU cost model")."""
  x = jnp.linspace(-4.0, 4.0, 4 * 8 * 16, dtype=jnp.float32).reshape(4, 8, 16)
  x = x.astype(jnp.bfloat16)

  def residuals(f):
    _, vjp = jax.vjp(f, x)
    return [a for a in jax.tree_util.tree_leaves(vjp) if getattr(a, "shape", ()) == x.shape]

  kept = residuals(blocks.ACTIVATIONS["gelu"])
  assert len(kept) == 1 and np.array_equal(np.asarray(kept[0], np.float32),
                                           np.asarray(x, np.float32))
  assert len(residuals(lambda t: jax.nn.gelu(t, approximate=False))) > 1


def test_feed_forward_is_the_same_function_in_training_and_evaluation():
  cfg = TransformerConfig(hidden_size=8, num_heads=2, num_layers=1, mlp_dim=16,
                          dropout_rate=0.0)
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 8))
  params = blocks.FeedForward(cfg).init(jax.random.PRNGKey(1), x)
  train = blocks.FeedForward(cfg).apply(params, x)
  evaluate = blocks.FeedForward(cfg.replace(deterministic=True)).apply(params, x)
  np.testing.assert_allclose(train, evaluate, rtol=1e-5, atol=1e-6)
  p = params["params"]
  unbox = lambda t: getattr(t, "value", t)
  h = x @ unbox(p["wi"]["kernel"]) + unbox(p["wi"]["bias"])
  want = jax.nn.gelu(h, approximate=False) @ unbox(p["wo"]["kernel"]) + unbox(p["wo"]["bias"])
  np.testing.assert_allclose(train, want, rtol=1e-5, atol=1e-6)
