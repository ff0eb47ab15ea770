"""LayerNorm with a hand-written gradient: the same parameters and values as flax's
`nn.LayerNorm(use_fast_variance=False)` (two-pass variance in float32, as torch), with
a backward pass of two row reductions instead of the five autodiff derives.

Why: autodiff of the two-pass statistics gives XLA a backward of five row reductions
and their broadcasts (the mean's and the variance's chains, each through `x - mean`),
which XLA:CPU runs as separate passes over [rows, hidden]; the closed form
dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)),  g = dy * scale
needs two. The forward saves x_hat and rstd (what the closed form reads) instead of
x - mean and the variance. Measured on CPU in bench/RESULTS.md "LayerNorm's gradient".
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, epsilon: float) -> jax.Array:
  """(x - mean) / sqrt(var + epsilon) * scale + bias over the last axis; float32 in
  and out (LayerNorm casts around it, so autodiff casts the gradients back)."""
  return _forward(x, scale, bias, epsilon)[0]


def _forward(x, scale, bias, epsilon):
  centred = x - x.mean(-1, keepdims=True)                        # [..., H]
  rstd = jax.lax.rsqrt((centred * centred).mean(-1, keepdims=True) + epsilon)  # [..., 1]
  x_hat = centred * rstd
  return x_hat * scale + bias, (x_hat, rstd, scale)


def _backward(epsilon, residuals, dy):
  del epsilon
  x_hat, rstd, scale = residuals
  g = dy * scale                                                # [..., H]
  dx = rstd * (g - g.mean(-1, keepdims=True)
               - x_hat * (g * x_hat).mean(-1, keepdims=True))
  rows = tuple(range(dy.ndim - 1))
  return dx, (dy * x_hat).sum(rows), dy.sum(rows)


layer_norm.defvjp(_forward, _backward)


class LayerNorm(nn.Module):
  """nn.LayerNorm's interface and parameter names ("scale", "bias": the checkpoints and
  the interop mappings are unchanged) over `layer_norm`; output in `dtype`."""
  epsilon: float = 1e-6
  dtype: Any = None
  param_dtype: Any = jnp.float32
  scale_init: Callable = nn.initializers.ones_init()
  bias_init: Callable = nn.initializers.zeros_init()

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    features = x.shape[-1]
    scale = self.param("scale", self.scale_init, (features,), self.param_dtype)
    bias = self.param("bias", self.bias_init, (features,), self.param_dtype)
    f32 = jnp.float32
    y = layer_norm(x.astype(f32), scale.astype(f32), bias.astype(f32), self.epsilon)
    return y.astype(self.dtype or x.dtype)
