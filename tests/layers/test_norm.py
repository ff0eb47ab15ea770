"""layers/norm.py: the LayerNorm formula in float32 (two-pass variance, as torch), the
one-pass variance of narrower compute against the two-pass one, its gradient against
finite differences, and the parameters' logical names."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.norm import layer_norm

CFG = TransformerConfig(hidden_size=16, num_heads=2, num_layers=1, layer_norm_eps=1e-12)


def _init(cfg=CFG, shape=(3, 5, 16)):
  x = jax.random.normal(jax.random.PRNGKey(0), shape) * 3.0 + 7.0  # far from zero mean
  module = layer_norm(cfg, "ln")
  variables = module.init(jax.random.PRNGKey(1), x)
  scale = jax.random.normal(jax.random.PRNGKey(2), (16,))
  bias = jax.random.normal(jax.random.PRNGKey(3), (16,))
  params = {"params": {"scale": nn.Partitioned(scale, ("norm",)),
                       "bias": nn.Partitioned(bias, ("norm",))}}
  return module, variables, params, x, np.asarray(scale), np.asarray(bias)


def test_values_are_the_published_formula():
  module, _, params, x, scale, bias = _init()
  xs = np.asarray(x, np.float64)
  mean = xs.mean(-1, keepdims=True)
  var = ((xs - mean) ** 2).mean(-1, keepdims=True)                  # two-pass, as torch
  expected = (xs - mean) / np.sqrt(var + 1e-12) * scale + bias
  np.testing.assert_allclose(module.apply(params, x), expected, atol=2e-5)


def test_bfloat16_compute_keeps_float32_statistics():
  cfg = CFG.replace(dtype="bfloat16")
  module, _, params, x, scale, bias = _init(cfg)
  y = module.apply(params, x.astype(jnp.bfloat16))
  assert y.dtype == jnp.bfloat16
  xs = np.asarray(x.astype(jnp.bfloat16).astype(jnp.float32), np.float64)
  mean, std = xs.mean(-1, keepdims=True), xs.std(-1, keepdims=True)
  np.testing.assert_allclose(np.asarray(y, np.float32), (xs - mean) / std * scale + bias,
                             atol=0.1, rtol=0.02)


def test_bfloat16_takes_the_one_pass_variance_to_within_bfloat16_rounding():
  """float32 compute keeps torch's two passes; bf16 takes E[x²] - E[x]² in float32, which
  gives the two-pass outputs to within their own bf16 rounding (one unit in the last
  place), here with each row's mean 2.3 of its standard deviations off zero."""
  assert not layer_norm(CFG, "ln").use_fast_variance
  cfg = CFG.replace(dtype="bfloat16")
  module, _, params, x, _, _ = _init(cfg)
  assert module.use_fast_variance
  x = x.astype(jnp.bfloat16)
  two_pass = module.clone(use_fast_variance=False)
  got, want = (np.asarray(m.apply(params, x), np.float32) for m in (module, two_pass))
  ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(want), 1e-3))) - 7)
  assert np.all(np.abs(got - want) <= ulp), np.max(np.abs(got - want) / ulp)


def test_gradient_matches_finite_differences():
  module, _, params, x, _, _ = _init(shape=(2, 16))
  x = x.astype(jnp.float32)
  w = jax.random.normal(jax.random.PRNGKey(4), x.shape)
  loss = lambda x: jnp.sum(module.apply(params, x) * w)
  grad = jax.grad(loss)(x)
  eps = 1e-2
  for i, j in ((0, 0), (1, 7), (1, 15)):
    e = jnp.zeros_like(x).at[i, j].set(eps)
    numeric = (loss(x + e) - loss(x - e)) / (2 * eps)
    np.testing.assert_allclose(grad[i, j], numeric, rtol=2e-2, atol=2e-3)


def test_parameters_carry_logical_names():
  _, variables, _, _, _, _ = _init()
  for name in ("scale", "bias"):
    assert variables["params"][name].names == ("norm",)
