"""The products of the Dense / DenseGeneral layers: mixed precision and a flat layout for
TPU's lanes. `for_config(cfg)` is the `dot_general=` of flax's `nn.Dense` /
`nn.DenseGeneral`: with cfg.matmul_dtype both operands cast to it, accumulated in float32.
"""
from __future__ import annotations

import math

import flax.linen as nn
from flax.core import meta
import jax
import jax.numpy as jnp
from jax import lax


def _dims(n: int, lhs_ndim: int):
  return ((tuple(range(lhs_ndim - n, lhs_ndim)), tuple(range(n))), ((), ()))


def for_config(cfg):
  """The `dot_general=` of a Dense layer under TransformerConfig `cfg` (None = lax's)."""
  if cfg.matmul_dtype is None:
    return None
  dtype = jnp.dtype(cfg.matmul_dtype)
  return lambda *args, **kwargs: cast_dot_general(dtype, *args, **kwargs)


class FlatDense(nn.DenseGeneral):
  """nn.DenseGeneral over the last axis with its parameters drawn the same way, kernel
  [*in_shape, *features], but flat arrays: [..., prod(in_shape)] -> [..., prod(features)]
  (in_shape (): the input's last axis; int features: nn.Dense's parameters, the FFN's).
  For q/k/v and W^O with d = 64 on TPU, no [.., heads, d] array then exists for the layout
  to pad to 128 lanes or lay out with the positions minor. The bias is added in float32, so
  under bf16 its gradient sums in float32: exact, and cheaper in the TPU compiler's estimate
  (docs/performance-notes.md, "Bias gradients in float32")."""
  in_shape: tuple = ()

  @nn.compact
  def __call__(self, inputs):
    features = (self.features,) if isinstance(self.features, int) else tuple(self.features)
    in_shape = tuple(self.in_shape) or (inputs.shape[-1],)
    k, width = math.prod(in_shape), math.prod(features)
    kernel = self.param("kernel", _drawn_flat(self.kernel_init, (k, width)),
                        in_shape + features, self.param_dtype)
    bias = self.param("bias", _drawn_flat(self.bias_init, (width,)), features,
                      self.param_dtype) if self.use_bias else None
    inputs, kernel = self.promote_dtype(inputs, kernel, dtype=self.dtype)
    y = (self.dot_general or lax.dot_general)(inputs, kernel.reshape(k, width),
                                              _dims(1, inputs.ndim), precision=self.precision)
    if bias is None:
      return y
    wide = jnp.promote_types(y.dtype, jnp.float32)  # float32, or float64 under jax x64
    return (y.astype(wide) + bias.reshape(width).astype(wide)).astype(y.dtype)


def _drawn_flat(init, flat_shape):
  """DenseGeneral's init of a parameter: drawn [K, O] (fan-in K), then reshaped."""
  def wrapped(rng, shape, dtype=jnp.float32):
    x = init(rng, flat_shape, dtype)
    if isinstance(x, meta.AxisMetadata):
      return meta.replace_boxed(x, jnp.reshape(x.unbox(), shape))
    return jnp.reshape(x, shape)
  return wrapped


def cast_dot_general(dtype, lhs, rhs, dimension_numbers, precision=None,
                     preferred_element_type=None, **kwargs):
  """`lax.dot_general` of both operands cast to `dtype`, accumulated and returned in float32.

  The weights' cast is loop-invariant inside a decode loop: XLA hoists it out, so the
  loop reads `dtype` weights (half the bytes for bfloat16).
  """
  del preferred_element_type
  return lax.dot_general(lhs.astype(dtype), rhs.astype(dtype), dimension_numbers,
                         precision=precision, preferred_element_type=jnp.float32, **kwargs)
