"""The matmul of the Dense / DenseGeneral layers, its gradient written as 2-D matmuls.

`dot_general` is passed to flax's `nn.Dense(..., dot_general=dot_general)` and
`nn.DenseGeneral`. The forward pass is exactly `lax.dot_general`; only the backward
differs from jax's automatic transpose: for the dense contraction y[m..., o...] =
x[m..., k...] · w[k..., o...] it flattens to 2-D and computes
  dx = g2 · w2ᵀ,   dw = x2ᵀ · g2     (x2 [M, K], w2 [K, O], g2 [M, O])
Why: on XLA:CPU, jax's transpose of the 3-D/4-D contractions (e.g. the attention
projections' [batch, len, embed] x [embed, heads, d]) gives dot_generals whose operand
layouts XLA satisfies by fusing the gradient's producer (LayerNorm backward, dropout)
into a transposing loop fusion, which runs at a fraction of memory speed (profile of
BERT-base: ~300 ms of a 3 s step in [768, 1024] transposing fusions). With the 2-D
form the same step takes 15% less time (bench/RESULTS.md "Train step").
Only a CPU default (TransformerConfig.dense_grad_2d, per platform). Re-measured for TPU
with the activation pins applied (bert_jax.aot, BERT-base on v5e:2x2, 256 rows, remat
dots_no_batch; bench/RESULTS.md "AOT"): temporaries per chip fell 2.3-2.8x (data
parallel S512 8.45 -> 3.11 GiB), but that is not the gradient's form: the custom_vjp
hides its dot_general from jax.checkpoint's policies, so under dots_no_batch the
projections' outputs are no longer saved and the layer is recomputed as under `full`
(in the sweep, dots_no_batch and full then compile to the same program). A like-for-like
comparison (remat none or full) is still to be compiled, so accelerators keep jax's
gradient; on CPU this means dots_no_batch recomputes like full there too.

Contractions of another form (batch dimensions, contracting dims not trailing in x and
leading in w) go to `lax.dot_general` with its usual gradient.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from flax.linen.dtypes import promote_dtype
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


def for_config(cfg):
  """The `dot_general=` of a Dense layer under TransformerConfig `cfg` (None = lax's):
  with matmul_dtype, cast_dot_general's numerics, and where dense_grad_2d (CPU) the 2-D
  gradient with its backward products in matmul_dtype too."""
  if cfg.matmul_dtype is not None:
    if cfg.dense_grad_2d:
      return functools.partial(dot_general, matmul_dtype=jnp.dtype(cfg.matmul_dtype))
    return functools.partial(cast_dot_general, jnp.dtype(cfg.matmul_dtype))
  return dot_general if cfg.dense_grad_2d else None


def flat(dot_general=None):
  """`dot_general` (None: lax's) for a dense contraction with its contracted and its
  output dims each merged into one: x[m..., k...] · w[k..., o...] computed as the 2-D-
  featured dot x[m..., K] · w[K, O], then reshaped to [m..., o...]. Same math, same
  parameters; only the shape of the dot XLA sees changes.

  Why: the attention projections' dots are [batch, len, embed] x [embed, heads, d] ->
  [batch, len, heads, d] (and W^O the reverse). With d = 64 on TPU, what a remat policy
  such as dots_no_batch saves of them is that raw dot output, whose scanned stack took
  a layout with d minor, padded to 128 lanes: twice its bytes (bench/RESULTS.md "Remat
  policies that keep the attention projections"). A [batch, len, heads * d] dot has no
  64-wide dimension to pad. Used where splash attention runs (attention.splash_layout).
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


def cast_kernels(params, cfg):
  """`params` with every Dense / DenseGeneral kernel stored in cfg.matmul_dtype (unchanged
  when it is None), for inference: cast once at load, not in every jitted call.

  A jitted generate or beam search casts float32 kernels to the matmul dtype on each call
  (hoisted out of its loop, not out of the call: GPT-2 small, batch 1, the fixed cost of a
  call was 0.146 s against float32's 0.050, and is 0.088 s with the kernels cast at load;
  bench/RESULTS.md "Issue 29: the decode step profiled"). Kernels already in that dtype
  compute the same: flax promotes them to the compute dtype and cast_dot_general casts
  back, a lossless pair XLA removes. Embedding tables are left alone: they are also
  gathered, and a bfloat16 table would change the residual stream.
  """
  if cfg.matmul_dtype is None:
    return params
  dtype = jnp.dtype(cfg.matmul_dtype)

  def cast(path, leaf):
    names = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]  # boxed or not
    return leaf.astype(dtype) if names and names[-1] == "kernel" else leaf

  return jax.tree_util.tree_map_with_path(cast, params)


def attend(cfg, embedder, x, logits_dtype=jnp.float32):
  """A tied output layer: x [..., d] · embedder.embeddingᵀ -> logits [..., vocab] in
  logits_dtype (None: the product's own, x's compute dtype, as BERT's MLM head adds its
  bias in; float32 with cfg.matmul_dtype), the matmul operands in cfg.matmul_dtype if set
  (else flax's Embed.attend).

  Where dense_grad_2d (CPU), training and scoring take transposed_dot, whose gradient
  keeps the transpose off the [rows, vocab] logits gradient (BERT's MLM head; GPT's
  language-model head: every position's logits). Decoding keeps Embed.attend: at a few
  rows a step the transposed product runs slower on XLA:CPU (GPT-2 small's vocabulary,
  batch 1: 4.9 ms against 6.1 a token's projection)."""
  if cfg.dense_grad_2d and not cfg.decode:
    x, table = promote_dtype(x, embedder.embedding, dtype=cfg.compute_dtype)  # as attend
    logits = transposed_dot(x, table, cfg.matmul_dtype)
  elif cfg.matmul_dtype is None:
    logits = embedder.attend(x)
  else:
    return cast_dot_general(jnp.dtype(cfg.matmul_dtype), x, embedder.embedding,
                            (((x.ndim - 1,), (1,)), ((), ())))       # float32
  return logits if logits_dtype is None else logits.astype(logits_dtype)


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
  otherwise transposes inside the softmax-backward fusion (BERT-mini's MLM head: 37 ms of
  a ~1 s step in that one fusion). matmul_dtype: None, the operands' dtype; else the
  Dense layers' rule: both operands, and in the backward the cotangent too, in that
  dtype, summed in float32, and float32 logits.
  """
  cast = None if matmul_dtype is None else (jnp.dtype(matmul_dtype), x.dtype, table.dtype)
  return _dense_dot(x, table.T, 1, None, cast)


@jax.custom_vjp
def add_bias(y, bias):
  """y [..., n] + bias [n], whose gradient (a column sum of g) is taken as ones · g2: a
  matmul. XLA:CPU's column-sum reduction is ~40x slower than that on [640, 30522]
  (66 ms vs 1.5 ms here: the MLM output bias of BERT-mini at batch 32)."""
  return y + bias


def _add_bias_fwd(y, bias):
  return y + bias, bias.shape


def _add_bias_bwd(shape, g):
  g2 = g.reshape(-1, shape[-1])                                        # [M, n]
  return g, jnp.dot(jnp.ones((g2.shape[0],), g2.dtype), g2).reshape(shape)


add_bias.defvjp(_add_bias_fwd, _add_bias_bwd)
