"""layers/blocks.py: the exact GELU against its definition in float64 (stdlib erfc) and
jax's erfc form, values and gradients."""
import math

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.layers import blocks


def _reference(x):
  """GELU(x) = x Phi(x) and its derivative Phi(x) + x phi(x), in float64."""
  x = np.asarray(x, np.float64)
  cdf = 0.5 * np.vectorize(math.erfc)(-x / math.sqrt(2.0))
  pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
  return x * cdf, cdf + x * pdf


def test_exact_gelu_matches_the_definition_and_jax_erfc_form():
  x = jnp.linspace(-10.0, 10.0, 20001, dtype=jnp.float32)
  value, grad = _reference(x)
  ours = blocks.ACTIVATIONS["gelu"](x)
  ours_grad = jax.vmap(jax.grad(blocks.ACTIVATIONS["gelu"]))(x)
  np.testing.assert_allclose(ours, value, rtol=0, atol=1.1e-6)
  np.testing.assert_allclose(ours_grad, grad, rtol=0, atol=2e-6)
  np.testing.assert_allclose(ours, jax.nn.gelu(x, approximate=False), rtol=0, atol=1.1e-6)
  # Not the tanh approximation (which is off by up to ~5e-4 here).
  assert float(jnp.abs(jax.nn.gelu(x, approximate=True) - value).max()) > 1e-4


def test_exact_gelu_keeps_bfloat16():
  x = jnp.linspace(-4.0, 4.0, 101, dtype=jnp.bfloat16)
  y = blocks.ACTIVATIONS["gelu"](x)
  assert y.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(y, np.float32), _reference(np.asarray(x, np.float32))[0],
                             rtol=2e-2, atol=2e-2)
