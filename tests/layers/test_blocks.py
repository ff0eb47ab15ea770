"""layers/blocks.py: the exact GELU's two forms against its definition in float64 (stdlib
erfc), values and gradients, and which form FeedForward takes when."""
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


@pytest.mark.parametrize("form", ["training", "inference"])
def test_both_forms_of_the_exact_gelu_match_the_definition(form):
  f = blocks.gelu if form == "training" else blocks.ACTIVATIONS["gelu"]
  x = jnp.linspace(-10.0, 10.0, 20001, dtype=jnp.float32)
  value, grad = _reference(x)
  np.testing.assert_allclose(f(x), value, rtol=0, atol=1.1e-6)
  np.testing.assert_allclose(jax.vmap(jax.grad(f))(x), grad, rtol=0, atol=2e-6)
  # Not the tanh approximation (which is off by up to ~5e-4 here).
  assert float(jnp.abs(jax.nn.gelu(x, approximate=True) - value).max()) > 1e-4


def test_training_gelu_keeps_bfloat16():
  x = jnp.linspace(-4.0, 4.0, 101, dtype=jnp.bfloat16)
  y = blocks.gelu(x)
  assert y.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(y, np.float32), _reference(np.asarray(x, np.float32))[0],
                             rtol=2e-2, atol=2e-2)


def test_feed_forward_takes_the_erf_form_only_when_training(monkeypatch):
  cfg = TransformerConfig(hidden_size=8, num_heads=2, num_layers=1, mlp_dim=16)
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 8))
  params = blocks.FeedForward(cfg).init(jax.random.PRNGKey(1), x)
  train = blocks.FeedForward(cfg).apply(params, x)
  evaluate = blocks.FeedForward(cfg.replace(deterministic=True)).apply(params, x)
  np.testing.assert_allclose(train, evaluate, rtol=1e-5, atol=1e-6)   # the same function
  calls = []
  monkeypatch.setattr(blocks, "gelu", lambda h: calls.append("erf") or h)
  blocks.FeedForward(cfg).apply(params, x)
  blocks.FeedForward(cfg.replace(deterministic=True)).apply(params, x)
  blocks.FeedForward(cfg.replace(activation="relu")).apply(params, x)
  assert calls == ["erf"]
