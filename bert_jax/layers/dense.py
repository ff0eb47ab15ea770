"""The products of the Dense / DenseGeneral layers: mixed precision and a flat layout for
TPU's lanes. `for_config(cfg)` is the `dot_general=` of flax's `nn.Dense` /
`nn.DenseGeneral`: with cfg.matmul_dtype both operands cast to it, accumulated in float32.
"""
from __future__ import annotations

import math
import jax
import jax.numpy as jnp
from jax import lax


def _is_dense(lhs_ndim: int, dimension_numbers) -> int:
  """The number of contracted dims when the contraction is x[..., k...] · w[k..., ...]."""
  (lhs_c, rhs_c), (lhs_b, rhs_b) = dimension_numbers
  n = len(lhs_c)
  dense = (not lhs_b and not rhs_b and n > 0
           and tuple(lhs_c) == tuple(range(lhs_ndim - n, lhs_ndim))
           and tuple(rhs_c) == tuple(range(n)))
  return n if dense else 0


def _dims(n: int, lhs_ndim: int):
  return ((tuple(range(lhs_ndim - n, lhs_ndim)), tuple(range(n))), ((), ()))


def for_config(cfg):
  """The `dot_general=` of a Dense layer under TransformerConfig `cfg` (None = lax's)."""
  if cfg.matmul_dtype is None:
    return None
  dtype = jnp.dtype(cfg.matmul_dtype)
  return lambda *args, **kwargs: cast_dot_general(dtype, *args, **kwargs)


def flat(dot_general=None):
  """`dot_general` (None: lax's) for a dense contraction with its contracted and its
  output dims each merged into one: x[m..., k...] · w[k..., o...] computed as the 2-D-
  featured dot x[m..., K] · w[K, O], then reshaped to [m..., o...]. Same math, same
  parameters; only the shape of the dot XLA sees changes.

  Why: the attention projections' dots are [batch, len, embed] x [embed, heads, d] ->
  [batch, len, heads, d] (and W^O the reverse). With d = 64 on TPU, what a remat policy
  such as dots_no_batch saves of them is that raw dot output, whose scanned stack takes
  a layout with d minor, padded to 128 lanes (docs/performance-notes.md). A [batch, len,
  heads * d] dot has no 64-wide dimension to pad. Used where splash attention runs
  (attention.splash_layout).
  """
  inner = lax.dot_general if dot_general is None else dot_general

  def flat_dot_general(lhs, rhs, dimension_numbers, precision=None, **kwargs):
    n = _is_dense(lhs.ndim, dimension_numbers)
    if not n:
      return inner(lhs, rhs, dimension_numbers, precision=precision, **kwargs)
    rows, features = lhs.shape[:lhs.ndim - n], rhs.shape[n:]
    k = math.prod(rhs.shape[:n])
    x = lhs.reshape(rows + (k,))                                      # [m..., K]
    w = rhs.reshape(k, math.prod(features))                           # [K, O]
    y = inner(x, w, _dims(1, x.ndim), precision=precision, **kwargs)  # [m..., O]
    return y.reshape(rows + features)                                 # [m..., o...]

  return flat_dot_general


def cast_dot_general(dtype, lhs, rhs, dimension_numbers, precision=None,
                     preferred_element_type=None, **kwargs):
  """`lax.dot_general` of both operands cast to `dtype`, accumulated and returned in float32.

  The weights' cast is loop-invariant inside a decode loop: XLA hoists it out, so the
  loop reads `dtype` weights (half the bytes for bfloat16).
  """
  del preferred_element_type
  return lax.dot_general(lhs.astype(dtype), rhs.astype(dtype), dimension_numbers,
                         precision=precision, preferred_element_type=jnp.float32, **kwargs)
