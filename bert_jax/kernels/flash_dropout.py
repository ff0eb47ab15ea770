"""Flash attention with attention dropout: a Pallas TPU kernel, forward and backward.

BERT trains with attention dropout (0.1 on the probabilities), which splash's kernel
lacks; the written-out reference (kernels/reference.py) then holds [batch, heads, q, kv]
scores, probabilities and the mask in HBM. Here softmax(QK^T / sqrt(d)) is computed block
by block with an online softmax (Dao et al. 2022, FlashAttention), the statistics in
float32, and each block of probabilities is dropped where dropout_hash's keep bits say,
kept ones scaled by 1 / (1 - rate). The forward saves the output and one log-sum-exp per
query; the backward (a dq kernel over key blocks, a dk / dv kernel over query blocks)
recomputes the probabilities and the same keep bits from the global positions, so neither
the scores nor the mask is ever stored. The denominators are the undropped sums, as in
the reference: dropout acts after the softmax.

Masks are segment ids (q_id == kv_id, and kv <= q when causal, |q - kv| <= w with a
sliding window w; no block is skipped), as splash takes them: kernels/splash.py pads
lengths to 128 and gives padded positions ids that match nothing; it also runs this
kernel under shard_map (rows over the batch axes, heads over `tensor`), telling each
device the global index of its first row and head so the bits do not depend on the split.
On CPU the kernel runs in Pallas interpret mode (tests/kernels/test_flash_dropout.py
checks it against the reference given the same mask). A query with no allowed key
(padding) averages every value of its padded row.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bert_jax.kernels import dropout_hash
from bert_jax.kernels import splash
from bert_jax.kernels.masks import MASK_VALUE
from bert_jax.runtime import tracing

Array = jax.Array

LANES = splash.LANES   # ids are broadcast to a tile's lanes (a column) or sublanes (a row)
SUBLANES = 8
_NT = (((1,), (1,)), ((), ()))   # a @ b.T
_NN = (((1,), (0,)), ((), ()))   # a @ b
_F32 = jnp.float32


def unsupported(query: Array, value: Array, bias, bool_mask) -> str:
  """Why this kernel cannot compute this attention here ("" when it can): splash's
  needs (kernels/splash.fused_unsupported) without its want of dropout."""
  return splash.fused_unsupported(query, value, bias, bool_mask)


@dataclasses.dataclass(frozen=True)
class _Static:
  """What the kernels are specialised on (hashable: custom_vjp's nondiff argument)."""
  scale: float
  rate: float
  causal: bool
  window: int       # masks.SegmentMask.window: 0 global, else |q - kv| <= window
  block_q: int
  block_kv: int
  interpret: bool


def flash_dropout_attention(query: Array, key: Array, value: Array, mask=None,
                            dropout_rng=None, dropout_rate: float = 0.0,
                            dtype=jnp.bfloat16, block_q: int | None = None,
                            block_kv: int | None = None) -> Array:
  """dropout(softmax(Q K^T / sqrt(d) + mask)) V by the fused kernel. Check `unsupported`.

  Args:
    query: [batch, q_len, heads, d]; key, value: [batch, kv_len, heads, d].
    mask: a masks.SegmentMask (its window included) or None (every key).
    dropout_rng: a jax PRNG key (needed when dropout_rate > 0): the seed of the bits.
    dropout_rate: the probability of dropping a probability; 0 is plain flash attention.
    block_q, block_kv: tile sizes (multiples of 128 dividing the padded lengths; default
      splash.block_size's); they change the speed, not the result or the mask.

  Returns:
    [batch, q_len, heads, d] in `dtype`: the reference's output given
    dropout_hash.keep_mask(seed_from_key(dropout_rng), ...) as the keep mask.
  """
  batch, q_len, _, d = query.shape
  kv_len = key.shape[1]
  if dropout_rate > 0.0 and dropout_rng is None:
    raise ValueError("attention dropout needs a dropout_rng")
  ids = splash.segment_ids(mask, batch, q_len, kv_len)
  if ids is None:   # no mask, lengths on the lanes: every id the same
    ids = (jnp.ones((batch, q_len), jnp.int32), jnp.ones((batch, kv_len), jnp.int32))
  # [batch, len, heads, d] -> [batch, heads, len, d], the lengths padded to the lanes.
  q, k, v = (splash.pad_to_lanes(x.astype(dtype).transpose(0, 2, 1, 3), 2)
             for x in (query, key, value))
  seed = (dropout_hash.seed_from_key(dropout_rng) if dropout_rate > 0.0
          else jnp.zeros((), jnp.int32))
  static = _Static(scale=1.0 / math.sqrt(d), rate=float(dropout_rate),
                   causal=mask is not None and mask.causal,
                   window=0 if mask is None else mask.window,
                   block_q=block_q or splash.block_size(q.shape[2]),
                   block_kv=block_kv or splash.block_size(k.shape[2]),
                   interpret=tracing.trace_platform() == "cpu")

  def local(q, k, v, q_ids, kv_ids, seed, first):
    meta = jnp.concatenate([seed[None], first])   # int32 [3]: seed, first row, first head
    return _attention(q, k, v, q_ids, kv_ids, meta, static)

  out = splash.shard_rows_and_heads(local, (q, k, v), ids, (seed,), offsets=True)
  return out[:, :, :q_len].transpose(0, 2, 1, 3)        # [batch, q_len, heads, d]


# ---------------------------------------------------------------------- the custom VJP
@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def _attention(q, k, v, q_ids, kv_ids, meta, static):
  return _forward(q, k, v, q_ids, kv_ids, meta, static)[0]


def _attention_fwd(q, k, v, q_ids, kv_ids, meta, static):
  out, lse = _forward(q, k, v, q_ids, kv_ids, meta, static)
  return out, (q, k, v, q_ids, kv_ids, meta, out, lse)


def _attention_bwd(static, residuals, d_out):
  q, k, v, q_ids, kv_ids, meta, out, lse = residuals
  # rowsum(dO * O): the softmax's correction term, dropout included (O is the dropped one).
  di = jnp.sum(d_out.astype(_F32) * out.astype(_F32), axis=-1)[:, :, None, :]
  d_out = d_out.astype(q.dtype)
  dq = _backward_dq(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static)
  dk, dv = _backward_dkv(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static)
  return dq, dk, dv, None, None, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def _columns(ids: Array) -> Array:
  """[batch, len] -> [batch, len, LANES]: a block's ids down a tile's rows."""
  return jnp.broadcast_to(ids[:, :, None], ids.shape + (LANES,))


def _rows(ids: Array) -> Array:
  """[batch, len] -> [batch, SUBLANES, len]: a block's ids along a tile's lanes."""
  return jnp.broadcast_to(ids[:, None, :], (ids.shape[0], SUBLANES, ids.shape[1]))


def _call(name, kernel, grid, in_specs, out_specs, out_shape, scratch, static, cost, *args):
  return pl.pallas_call(
      kernel, out_shape=out_shape, name=name,   # named in profiles and the HLO
      grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=grid,
                                             in_specs=in_specs, out_specs=out_specs,
                                             scratch_shapes=scratch),
      # The last grid axis walks the other side's blocks into one accumulator.
      compiler_params=pltpu.CompilerParams(
          dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
      cost_estimate=cost, interpret=static.interpret)(*args)


def _cost(q, k, static: _Static, matmuls: int, q_arrays: int, k_arrays: int, rows: int,
          q_again: bool) -> pl.CostEstimate:
  """What XLA is told a kernel costs (it cannot see inside a custom call; the TPU
  compiler's estimate of the step, bert_jax/aot/cost.py, takes it as it is). Bytes:
  q_arrays [.., q_len, d] and k_arrays [.., kv_len, d] arrays and `rows` float32 [b, h,
  q_len] statistics, the side that the grid's inner axis walks read once per block of the
  other side (q_again: the query side is re-read, else the key side); ids left out."""
  batch, heads, q_len, d = q.shape
  kv_len = k.shape[2]
  elements = batch * heads * q_len * kv_len
  q_bytes = q_arrays * q.size * q.dtype.itemsize + rows * 4 * batch * heads * q_len
  k_bytes = k_arrays * k.size * k.dtype.itemsize
  if q_again:
    q_bytes *= kv_len // static.block_kv
  else:
    k_bytes *= q_len // static.block_q
  return pl.CostEstimate(flops=2 * matmuls * elements * d, transcendentals=elements,
                         bytes_accessed=int(q_bytes + k_bytes))


# ---------------------------------------------------------------------- in the kernels
def _dropped(meta_ref, q_pos, kv_pos, rate: float, x: Array) -> Array:
  """x with the dropped elements 0 (kept ones unscaled): q_pos / kv_pos broadcast to
  x's shape, either way round. Grid axes 0 and 1 are the local row and head."""
  return jnp.where(_keep(meta_ref, q_pos, kv_pos, rate), x, 0.0)


def _keep(meta_ref, q_pos, kv_pos, rate: float) -> Array:
  """The keep bits of a block (see _dropped)."""
  row = meta_ref[1] + pl.program_id(0)
  head = meta_ref[2] + pl.program_id(1)
  stream = dropout_hash.stream_word(meta_ref[0], row, head)
  return dropout_hash.keep(dropout_hash.query_word(stream, q_pos),
                           dropout_hash.key_word(kv_pos), rate)


def _masked(s: Array, allowed: Array, q_pos, kv_pos, static: _Static) -> Array:
  if static.causal:
    allowed = jnp.logical_and(allowed, kv_pos <= q_pos)
  if static.window:   # |q - kv| <= window, as two comparisons (no integer abs needed)
    allowed = allowed & (q_pos - kv_pos <= static.window) & (kv_pos - q_pos <= static.window)
  return jnp.where(allowed, s, MASK_VALUE)


def _positions(start, size: int, axis: int) -> Array:
  """Global positions start.. of a block, as a column (axis 0) or a row (axis 1)."""
  shape = (size, 1) if axis == 0 else (1, size)
  return start + lax.broadcasted_iota(jnp.int32, shape, axis)


def _forward_kernel(meta_ref, q_ref, k_ref, v_ref, q_ids_ref, kv_ids_ref, o_ref, lse_ref,
                    m_ref, l_ref, acc_ref, *, static: _Static):
  i, j = pl.program_id(2), pl.program_id(3)          # query block, key block
  bq, bk = q_ref.shape[0], k_ref.shape[0]

  @pl.when(j == 0)
  def _():
    m_ref[...] = jnp.full(m_ref.shape, -jnp.inf, _F32)
    l_ref[...] = jnp.zeros(l_ref.shape, _F32)
    acc_ref[...] = jnp.zeros(acc_ref.shape, _F32)

  q_pos, kv_pos = _positions(i * bq, bq, 0), _positions(j * bk, bk, 1)
  s = lax.dot_general(q_ref[...], k_ref[...], _NT, preferred_element_type=_F32)
  s = _masked(s * static.scale, q_ids_ref[:, :1] == kv_ids_ref[:1, :], q_pos, kv_pos,
              static)                                        # [bq, bk]
  m_prev = m_ref[...]                                # [bq, LANES], the lanes all equal
  m_next = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
  p = jnp.exp(s - m_next[:, :1])
  alpha = jnp.exp(m_prev - m_next)
  l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
  m_ref[...] = m_next
  if static.rate:
    p = _dropped(meta_ref, q_pos, kv_pos, static.rate, p)
  pv = lax.dot_general(p.astype(v_ref.dtype), v_ref[...], _NN, preferred_element_type=_F32)
  acc_ref[...] = acc_ref[...] * alpha[:, :1] + pv

  @pl.when(j == pl.num_programs(3) - 1)
  def _():
    l = l_ref[...]
    scale = (1.0 / (1.0 - static.rate)) / l[:, :1]
    o_ref[...] = (acc_ref[...] * scale).astype(o_ref.dtype)
    # The log-sum-exp as a row [1, bq]: lane-dense in HBM, as the backward reads it.
    lse_ref[...] = (m_ref[...] + jnp.log(l)).T[:1, :]


def _dq_kernel(meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, q_ids_ref,
               kv_ids_ref, dq_ref, acc_ref, lse_col_ref, di_col_ref, *, static: _Static):
  i, j = pl.program_id(2), pl.program_id(3)          # query block, key block
  bq, bk = q_ref.shape[0], k_ref.shape[0]

  @pl.when(j == 0)
  def _():
    acc_ref[...] = jnp.zeros(acc_ref.shape, _F32)
    # Rows [1, bq] -> columns [bq, LANES], once per query block, not per key block.
    lse_col_ref[...] = jnp.broadcast_to(lse_ref[...], (LANES, bq)).T
    di_col_ref[...] = jnp.broadcast_to(di_ref[...], (LANES, bq)).T

  q_pos, kv_pos = _positions(i * bq, bq, 0), _positions(j * bk, bk, 1)
  s = lax.dot_general(q_ref[...], k_ref[...], _NT, preferred_element_type=_F32)
  s = _masked(s * static.scale, q_ids_ref[:, :1] == kv_ids_ref[:1, :], q_pos, kv_pos,
              static)                                        # [bq, bk]
  p = jnp.exp(s - lse_col_ref[:, :1])
  dp = lax.dot_general(do_ref[...], v_ref[...], _NT, preferred_element_type=_F32)
  if static.rate:
    dp = _dropped(meta_ref, q_pos, kv_pos, static.rate, dp) * (1.0 / (1.0 - static.rate))
  ds = p * (dp - di_col_ref[:, :1])
  acc_ref[...] += lax.dot_general(ds.astype(k_ref.dtype), k_ref[...], _NN,
                                  preferred_element_type=_F32)

  @pl.when(j == pl.num_programs(3) - 1)
  def _():
    dq_ref[...] = (acc_ref[...] * static.scale).astype(dq_ref.dtype)


def _dkv_kernel(meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, q_ids_ref,
                kv_ids_ref, dk_ref, dv_ref, dk_acc_ref, dv_acc_ref, *, static: _Static):
  """The transposed view, [bk, bq]: the per-query lse and di are then rows."""
  j, i = pl.program_id(2), pl.program_id(3)          # key block, query block
  bq, bk = q_ref.shape[0], k_ref.shape[0]

  @pl.when(i == 0)
  def _():
    dk_acc_ref[...] = jnp.zeros(dk_acc_ref.shape, _F32)
    dv_acc_ref[...] = jnp.zeros(dv_acc_ref.shape, _F32)

  kv_pos, q_pos = _positions(j * bk, bk, 0), _positions(i * bq, bq, 1)
  s = lax.dot_general(k_ref[...], q_ref[...], _NT, preferred_element_type=_F32)
  s = _masked(s * static.scale, kv_ids_ref[:, :1] == q_ids_ref[:1, :], q_pos, kv_pos,
              static)                                        # [bk, bq]
  p = jnp.exp(s - lse_ref[...])
  dp = lax.dot_general(v_ref[...], do_ref[...], _NT, preferred_element_type=_F32)
  kept = p
  if static.rate:
    keep = _keep(meta_ref, q_pos, kv_pos, static.rate)   # one hash for both products
    kept = jnp.where(keep, p, 0.0)
    dp = jnp.where(keep, dp, 0.0) * (1.0 / (1.0 - static.rate))
  dv_acc_ref[...] += lax.dot_general(kept.astype(do_ref.dtype), do_ref[...], _NN,
                                     preferred_element_type=_F32)
  ds = p * (dp - di_ref[...])
  dk_acc_ref[...] += lax.dot_general(ds.astype(q_ref.dtype), q_ref[...], _NN,
                                     preferred_element_type=_F32)

  @pl.when(i == pl.num_programs(3) - 1)
  def _():
    dk_ref[...] = (dk_acc_ref[...] * static.scale).astype(dk_ref.dtype)
    dv_ref[...] = (dv_acc_ref[...] * (1.0 / (1.0 - static.rate))).astype(dv_ref.dtype)


# ---------------------------------------------------------------------- the calls
def _forward(q, k, v, q_ids, kv_ids, meta, static: _Static):
  """q [b, h, Q, d], k/v [b, h, K, d], ids [b, Q] / [b, K] -> (out [b, h, Q, d],
  lse [b, h, 1, Q] float32)."""
  batch, heads, q_len, d = q.shape
  bq, bk = static.block_q, static.block_kv
  grid = (batch, heads, q_len // bq, k.shape[2] // bk)
  q_spec = pl.BlockSpec((None, None, bq, d), lambda b, h, i, j, _: (b, h, i, 0))
  kv_spec = pl.BlockSpec((None, None, bk, d), lambda b, h, i, j, _: (b, h, j, 0))
  in_specs = [q_spec, kv_spec, kv_spec,
              pl.BlockSpec((None, bq, LANES), lambda b, h, i, j, _: (b, i, 0)),
              pl.BlockSpec((None, SUBLANES, bk), lambda b, h, i, j, _: (b, 0, j))]
  out_specs = [q_spec, pl.BlockSpec((None, None, 1, bq), lambda b, h, i, j, _: (b, h, 0, i))]
  out_shape = [jax.ShapeDtypeStruct(q.shape, q.dtype),
               jax.ShapeDtypeStruct((batch, heads, 1, q_len), _F32)]
  scratch = [pltpu.VMEM((bq, LANES), _F32), pltpu.VMEM((bq, LANES), _F32),
             pltpu.VMEM((bq, d), _F32)]
  kernel = functools.partial(_forward_kernel, static=static)
  return _call("flash_dropout_fwd", kernel, grid, in_specs, out_specs, out_shape, scratch,
               static, _cost(q, k, static, 2, q_arrays=2, k_arrays=2, rows=1, q_again=False),
               meta, q, k, v, _columns(q_ids), _rows(kv_ids))


def _backward_specs(q, k, bq, bk, q_major: bool):
  """Block specs of (q, k, v, dO, lse, di) on a grid (b, h, outer, inner): the query
  blocks walk the outer axis (q_major) or the inner one."""
  d = q.shape[-1]
  def at(fn):   # fn(q block, kv block) -> block index, from the grid's last two axes
    return (lambda b, h, x, y, _: fn(b, h, x, y)) if q_major else (
        lambda b, h, x, y, _: fn(b, h, y, x))
  q_spec = pl.BlockSpec((None, None, bq, d), at(lambda b, h, i, j: (b, h, i, 0)))
  kv_spec = pl.BlockSpec((None, None, bk, d), at(lambda b, h, i, j: (b, h, j, 0)))
  row_spec = pl.BlockSpec((None, None, 1, bq), at(lambda b, h, i, j: (b, h, 0, i)))
  return q_spec, kv_spec, row_spec, at


def _backward_dq(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static: _Static):
  batch, heads, q_len, d = q.shape
  bq, bk = static.block_q, static.block_kv
  q_spec, kv_spec, row_spec, at = _backward_specs(q, k, bq, bk, q_major=True)
  in_specs = [q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec,
              pl.BlockSpec((None, bq, LANES), at(lambda b, h, i, j: (b, i, 0))),
              pl.BlockSpec((None, SUBLANES, bk), at(lambda b, h, i, j: (b, 0, j)))]
  scratch = [pltpu.VMEM((bq, d), _F32), pltpu.VMEM((bq, LANES), _F32),
             pltpu.VMEM((bq, LANES), _F32)]
  kernel = functools.partial(_dq_kernel, static=static)
  grid = (batch, heads, q_len // bq, k.shape[2] // bk)
  return _call("flash_dropout_dq", kernel, grid, in_specs, q_spec,
               jax.ShapeDtypeStruct(q.shape, q.dtype), scratch, static,
               _cost(q, k, static, 3, q_arrays=3, k_arrays=2, rows=2, q_again=False),
               meta, q, k, v, d_out, lse, di, _columns(q_ids), _rows(kv_ids))


def _backward_dkv(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static: _Static):
  batch, heads, q_len, d = q.shape
  bq, bk = static.block_q, static.block_kv
  q_spec, kv_spec, row_spec, at = _backward_specs(q, k, bq, bk, q_major=False)
  in_specs = [q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec,
              pl.BlockSpec((None, SUBLANES, bq), at(lambda b, h, i, j: (b, 0, i))),
              pl.BlockSpec((None, bk, LANES), at(lambda b, h, i, j: (b, j, 0)))]
  out_shape = [jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)]
  scratch = [pltpu.VMEM((bk, d), _F32), pltpu.VMEM((bk, d), _F32)]
  kernel = functools.partial(_dkv_kernel, static=static)
  grid = (batch, heads, k.shape[2] // bk, q_len // bq)
  return _call("flash_dropout_dkv", kernel, grid, in_specs, [kv_spec, kv_spec], out_shape,
               scratch, static,
               _cost(q, k, static, 4, q_arrays=2, k_arrays=4, rows=2, q_again=True),
               meta, q, k, v, d_out, lse, di, _rows(q_ids),
               _columns(kv_ids))
