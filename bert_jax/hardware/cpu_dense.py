"""The Dense layers' products with their gradients as 2-D matmuls: CPU tuning, opt-in.

hardware.configure() installs these into layers/dense.py on the CPU backend; a model
whose config sets dense_grad_2d (train/defaults: the CPU default) then takes them. The
forward pass is exactly `lax.dot_general`; only the backward differs from jax's
automatic transpose: for the dense contraction y[m..., o...] = x[m..., k...] · w[k..., o...]
it flattens to 2-D and computes
  dx = g2 · w2ᵀ,   dw = x2ᵀ · g2     (x2 [M, K], w2 [K, O], g2 [M, O])
Why: on XLA:CPU, jax's transpose of the 3-D/4-D contractions gives dot_generals whose
operand layouts XLA satisfies by fusing the gradient's producer (LayerNorm backward,
dropout) into a slow transposing loop (bench/RESULTS.md has the step it buys). The
custom_vjp hides the dot from jax.checkpoint's policies, which is why accelerators keep
jax's own gradient. Contractions of another form go to `lax.dot_general` as usual.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from bert_jax.layers import dense as dense_lib
from bert_jax.layers.dense import _dims, _is_dense, cast_dot_general


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _dense_dot(x, w, n: int, precision, cast):
  return _fwd(x, w, n, precision, cast)[0]


def _fwd(x, w, n, precision, cast):
  """cast: None (the operands' own dtype), or (matmul dtype, x's dtype, w's dtype): both
  operands in the matmul dtype, accumulated in float32 (cast_dot_general's numerics)."""
  if cast is None:
    return lax.dot_general(x, w, _dims(n, x.ndim), precision=precision), (x, w)
  x, w = x.astype(cast[0]), w.astype(cast[0])  # the residuals too: half the bytes saved
  return lax.dot_general(x, w, _dims(n, x.ndim), precision=precision,
                         preferred_element_type=jnp.float32), (x, w)


def _bwd(n, precision, cast, residuals, g):
  x, w = residuals
  x_dtype, w_dtype, accumulate = x.dtype, w.dtype, None
  if cast is not None:
    # Mixed precision as autocast does it: the backward products take the cotangent in
    # the matmul dtype too and accumulate in float32. Left to jax's transpose, they
    # multiplied a float32 cotangent by the cast operands, i.e. ran in float32: on an
    # AMX CPU XLA's bfloat16 dot with float32 accumulation is 5x its float32 one.
    g, accumulate, x_dtype, w_dtype = g.astype(cast[0]), jnp.float32, cast[1], cast[2]
  k, o = math.prod(w.shape[:n]), math.prod(w.shape[n:])
  m = x.size // k
  g2 = g.reshape(m, o)                                                  # [M, O]
  w2 = w.reshape(k, o)                                                  # [K, O]
  dx = lax.dot_general(g2, w2, (((1,), (1,)), ((), ())), precision=precision,
                       preferred_element_type=accumulate)               # [M, K]
  dw = lax.dot_general(x.reshape(m, k), g2, (((0,), (0,)), ((), ())),
                       precision=precision, preferred_element_type=accumulate)  # [K, O]
  return dx.reshape(x.shape).astype(x_dtype), dw.reshape(w.shape).astype(w_dtype)


_dense_dot.defvjp(_fwd, _bwd)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                matmul_dtype=None, **kwargs):
  """`lax.dot_general`, with the 2-D gradient above for dense contractions; with
  `matmul_dtype`, cast_dot_general's numerics (and for dense ones its gradient's too)."""
  n = _is_dense(lhs.ndim, dimension_numbers)
  if n and preferred_element_type is None and not kwargs:
    cast = None if matmul_dtype is None else (matmul_dtype, lhs.dtype, rhs.dtype)
    return _dense_dot(lhs, rhs, n, precision, cast)
  if matmul_dtype is not None:
    return cast_dot_general(matmul_dtype, lhs, rhs, dimension_numbers, precision=precision,
                            **kwargs)
  return lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                         preferred_element_type=preferred_element_type, **kwargs)



# ------------------------------------------------------------------- tied output layer
def transposed_dot(x, table, matmul_dtype=None):
  """x [..., d] · tableᵀ -> [..., n] (a tied output layer: table is the [n, d] embedding).

  The Dense layers' product (_dense_dot) of x and tableᵀ: its 2-D gradient gives
  dx = g2 · table and dtable = (x2ᵀ · g2)ᵀ, so the transpose falls on the small [d, M]
  activations and the [d, n] result, not on the [M, n] logits gradient, which XLA:CPU
  otherwise transposes inside the softmax-backward fusion. matmul_dtype: None, the operands' dtype; else the
  Dense layers' rule: both operands, and in the backward the cotangent too, in that
  dtype, summed in float32, and float32 logits.
  """
  cast = None if matmul_dtype is None else (jnp.dtype(matmul_dtype), x.dtype, table.dtype)
  return _dense_dot(x, table.T, 1, None, cast)


@jax.custom_vjp
def add_bias(y, bias):
  """y [..., n] + bias [n], whose gradient (a column sum of g) is taken as ones · g2: a
  matmul. XLA:CPU's column-sum reduction is ~40x slower than that on [640, 30522]
  (the MLM output bias of BERT-mini: bench/RESULTS.md)."""
  return y + bias


def _add_bias_fwd(y, bias):
  return y + bias, bias.shape


def _add_bias_bwd(shape, g):
  g2 = g.reshape(-1, shape[-1])                                        # [M, n]
  return g, jnp.dot(jnp.ones((g2.shape[0],), g2.dtype), g2).reshape(shape)


add_bias.defvjp(_add_bias_fwd, _add_bias_bwd)


def install() -> None:
  """Every Dense layer whose config sets dense_grad_2d takes these products from now on."""
  dense_lib.install_grad_2d(dense_lib.Grad2D(dot_general, transposed_dot, add_bias))
