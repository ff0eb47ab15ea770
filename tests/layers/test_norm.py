"""layers/norm.py: the closed-form LayerNorm gradient against autodiff of flax's LayerNorm
and against the formula written in numpy (float64)."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.layers import norm
from bert_jax.layers.config import TransformerConfig, layer_norm

EPS = 1e-12


def _inputs(dtype, shape=(3, 7, 48)):
  ks = jax.random.split(jax.random.PRNGKey(0), 4)
  # An offset and a spread, so the centring and the variance both matter.
  x = (3.0 * jax.random.normal(ks[0], shape) + 1.5).astype(dtype)
  params = {"scale": 1.0 + 0.3 * jax.random.normal(ks[1], shape[-1:]),
            "bias": 0.2 * jax.random.normal(ks[2], shape[-1:])}
  dy = jax.random.normal(ks[3], shape).astype(dtype)
  return x, {"params": params}, dy


def _value_and_grads(module, variables, x, dy):
  y, vjp = jax.vjp(lambda v, x: module.apply(v, x), variables, x)
  dv, dx = vjp(dy)
  return y, dx, dv["params"]["scale"], dv["params"]["bias"]


def test_values_and_gradients_equal_autodiff_of_flax_layernorm_in_float32():
  x, variables, dy = _inputs(jnp.float32)
  ours = _value_and_grads(norm.LayerNorm(epsilon=EPS, dtype=jnp.float32), variables, x, dy)
  flax_ln = nn.LayerNorm(epsilon=EPS, dtype=jnp.float32, use_fast_variance=False)
  theirs = _value_and_grads(flax_ln, variables, x, dy)
  for name, a, b in zip(("y", "dx", "dscale", "dbias"), ours, theirs):
    assert a.dtype == b.dtype == jnp.float32, name
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=name)


def test_gradients_match_the_formula_in_float64():
  x, variables, dy = _inputs(jnp.float32)
  y, dx, dscale, dbias = _value_and_grads(norm.LayerNorm(epsilon=EPS), variables, x, dy)
  x64, g, b, dy64 = (np.asarray(a, np.float64) for a in (
      x, variables["params"]["scale"], variables["params"]["bias"], dy))
  mean = x64.mean(-1, keepdims=True)
  rstd = 1.0 / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + EPS)
  x_hat = (x64 - mean) * rstd
  # d/dx of x_hat * g + b, written out from the definition (each row: the Jacobian of
  # centring and scaling by 1/sigma, times dy * g), not from the closed form under test.
  h = x64.shape[-1]
  expect_dx = np.empty_like(x64)
  for idx in np.ndindex(x64.shape[:-1]):
    xh, r = x_hat[idx], rstd[idx][0]
    jac = r * (np.eye(h) - 1.0 / h - np.outer(xh, xh) / h)        # d x_hat / d x
    expect_dx[idx] = jac.T @ (dy64[idx] * g)
  np.testing.assert_allclose(y, x_hat * g + b, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dx, expect_dx, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(dscale, (dy64 * x_hat).sum((0, 1)), rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(dbias, dy64.sum((0, 1)), rtol=1e-5, atol=1e-4)


def test_bfloat16_inputs_keep_float32_statistics_and_their_dtypes():
  x, variables, dy = _inputs(jnp.bfloat16)
  ours = _value_and_grads(norm.LayerNorm(epsilon=EPS, dtype=jnp.bfloat16), variables, x, dy)
  flax_ln = nn.LayerNorm(epsilon=EPS, dtype=jnp.bfloat16, use_fast_variance=False)
  theirs = _value_and_grads(flax_ln, variables, x, dy)
  for name, a, b in zip(("y", "dx", "dscale", "dbias"), ours, theirs):
    assert a.dtype == b.dtype, name
    # One bf16 rounding apart at most (the order of the float32 products differs).
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                               rtol=1e-2, atol=2e-2, err_msg=name)
  assert ours[0].dtype == ours[1].dtype == jnp.bfloat16
  assert ours[2].dtype == jnp.float32               # the parameters' own dtype


def test_the_models_norm_keeps_flax_parameter_names_and_logical_axes():
  cfg = TransformerConfig(hidden_size=16, num_heads=2, num_layers=1)
  variables = layer_norm(cfg, "attention_norm").init(jax.random.PRNGKey(0), jnp.ones((2, 16)))
  params = variables["params"]
  assert sorted(params) == ["bias", "scale"]
  assert params["scale"].names == ("norm",) and params["bias"].names == ("norm",)
  np.testing.assert_array_equal(params["scale"].value, np.ones(16))
  np.testing.assert_array_equal(params["bias"].value, np.zeros(16))


@pytest.mark.parametrize("remat", [False, True])
def test_gradient_under_jit_and_remat_is_the_same(remat):
  x, variables, dy = _inputs(jnp.float32)
  module = norm.LayerNorm(epsilon=EPS)
  f = lambda v, x: jnp.sum(module.apply(v, x) * dy)
  f = jax.checkpoint(f) if remat else f
  grads = jax.jit(jax.grad(f, argnums=(0, 1)))(variables, x)
  _, dx, dscale, dbias = _value_and_grads(module, variables, x, dy)
  np.testing.assert_allclose(grads[1], dx, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(grads[0]["params"]["scale"], dscale, rtol=1e-6, atol=1e-5)
  np.testing.assert_allclose(grads[0]["params"]["bias"], dbias, rtol=1e-6, atol=1e-5)
