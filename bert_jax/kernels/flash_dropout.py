"""Flash attention with attention dropout: a Pallas TPU kernel, forward and backward.

BERT trains with attention dropout (0.1 on the probabilities), which splash's kernel
lacks; the written-out reference (kernels/reference.py) then holds [batch, heads, q, kv]
scores, probabilities and the mask in HBM. Here softmax(QK^T / sqrt(d)) is computed block
by block with an online softmax (Dao et al. 2022, FlashAttention), the statistics in
float32, and each block of probabilities is dropped where dropout_hash's keep bits say,
kept ones scaled by 1 / (1 - rate). The forward saves the output and one log-sum-exp per
query; the backward (kernels/flash_dropout_bwd.py: a dq kernel over key blocks and a dk /
dv kernel over query blocks, or one kernel for the three when each side is one block)
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

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bert_jax.kernels import dropout_hash
from bert_jax.kernels import flash_dropout_bwd
from bert_jax.kernels import splash
from bert_jax.kernels.flash_blocks import (F32, LANES, NN, NT, Static, as_row, dims,
                                          dropped, head, heads_per_block, id_column,
                                          id_rows, id_spec, kernel_cost, masked, pallas,
                                          positions, put, row_spec, seq_spec)
from bert_jax.runtime import tracing

Array = jax.Array


def unsupported(query: Array, value: Array, bias, bool_mask) -> str:
  """Why this kernel cannot compute this attention here ("" when it can): splash's
  needs (kernels/splash.fused_unsupported) without its want of dropout."""
  return splash.fused_unsupported(query, value, bias, bool_mask)


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
  batch, q_len, heads, d = query.shape
  kv_len = key.shape[1]
  if dropout_rate > 0.0 and dropout_rng is None:
    raise ValueError("attention dropout needs a dropout_rng")
  ids = splash.segment_ids(mask, batch, q_len, kv_len)
  if ids is None:   # no mask, lengths on the lanes: every id the same
    ids = (jnp.ones((batch, q_len), jnp.int32), jnp.ones((batch, kv_len), jnp.int32))
  group = heads_per_block(d, heads // splash.head_ways())
  if group:   # [batch, len, heads * d]: a free reshape (flash_blocks.py: layout)
    q, k, v = (splash.pad_to_lanes(x.astype(dtype).reshape(x.shape[:2] + (heads * d,)), 1)
               for x in (query, key, value))
  else:       # [batch, heads, len, d]
    q, k, v = (splash.pad_to_lanes(x.astype(dtype).transpose(0, 2, 1, 3), 2)
               for x in (query, key, value))
  padded_q, padded_kv = q.shape[1 if group else 2], k.shape[1 if group else 2]
  seed = (dropout_hash.seed_from_key(dropout_rng) if dropout_rate > 0.0
          else jnp.zeros((), jnp.int32))
  static = Static(scale=1.0 / math.sqrt(d), rate=float(dropout_rate),
                   causal=mask is not None and mask.causal,
                   window=0 if mask is None else mask.window,
                   block_q=block_q or splash.block_size(padded_q),
                   block_kv=block_kv or splash.block_size(padded_kv),
                   interpret=tracing.trace_platform() == "cpu",
                   d=d, group=max(group, 1), packed=bool(group))

  def local(q, k, v, q_ids, kv_ids, seed, first):
    meta = jnp.concatenate([seed[None], first])   # int32 [3]: seed, first row, first head
    return _attention(q, k, v, q_ids, kv_ids, meta, static)

  out = splash.shard_rows_and_heads(local, (q, k, v), ids, (seed,), offsets=True,
                                    packed_d=d if group else 0)
  if group:
    return out[:, :q_len].reshape(batch, q_len, heads, d)
  return out[:, :, :q_len].transpose(0, 2, 1, 3)        # [batch, q_len, heads, d]


# ---------------------------------------------------------------------- the custom VJP
@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def _attention(q, k, v, q_ids, kv_ids, meta, static):
  return _forward(q, k, v, q_ids, kv_ids, meta, static)[0]


def _attention_fwd(q, k, v, q_ids, kv_ids, meta, static):
  out, lse = _forward(q, k, v, q_ids, kv_ids, meta, static)
  return out, (q, k, v, q_ids, kv_ids, meta, out, lse)


_attention.defvjp(_attention_fwd, flash_dropout_bwd.backward)


# ---------------------------------------------------------------------- the forward
def _forward_kernel(meta_ref, q_ref, k_ref, v_ref, q_ids_ref, kv_ids_ref, o_ref, lse_ref,
                    m_ref, l_ref, acc_ref, *, static: Static):
  i, j = pl.program_id(2), pl.program_id(3)          # query block, key block
  bq, bk = q_ref.shape[0], k_ref.shape[0]

  @pl.when(j == 0)
  def _():
    m_ref[...] = jnp.full(m_ref.shape, -jnp.inf, F32)
    l_ref[...] = jnp.zeros(l_ref.shape, F32)
    acc_ref[...] = jnp.zeros(acc_ref.shape, F32)

  q_pos, kv_pos = positions(i * bq, bq, 0), positions(j * bk, bk, 1)
  allowed = id_column(q_ids_ref) == kv_ids_ref[:1, :]
  for t in range(static.group):                      # the heads of the block
    s = lax.dot_general(head(static, q_ref, t), head(static, k_ref, t), NT,
                        preferred_element_type=F32)
    s = masked(s * static.scale, allowed, q_pos, kv_pos, static)    # [bq, bk]
    m_prev = m_ref[t]                                # [bq, LANES], the lanes all equal
    m_next = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
    p = jnp.exp(s - m_next[:, :1])
    alpha = jnp.exp(m_prev - m_next)
    l_ref[t] = alpha * l_ref[t] + jnp.sum(p, axis=1, keepdims=True)
    m_ref[t] = m_next
    if static.rate:
      p = dropped(meta_ref, q_pos, kv_pos, static, t, p)
    pv = lax.dot_general(p.astype(v_ref.dtype), head(static, v_ref, t), NN,
                         preferred_element_type=F32)
    acc_ref[t] = acc_ref[t] * alpha[:, :1] + pv

  @pl.when(j == pl.num_programs(3) - 1)
  def _():
    for t in range(static.group):
      l = l_ref[t]
      put(static, o_ref, t, acc_ref[t] * ((1.0 / (1.0 - static.rate)) / l[:, :1]))
      # The log-sum-exp as a row [1, bq]: lane-dense in HBM, as the backward reads it.
      lse_ref[t] = as_row(m_ref[t] + jnp.log(l))


def _forward(q, k, v, q_ids, kv_ids, meta, static: Static):
  """q / k / v in the static's layout (flash_blocks.py), ids [b, Q] / [b, K] -> (out
  like q, lse [b, h, 1, Q] float32)."""
  batch, heads, q_len = dims(static, q)
  bq, bk = static.block_q, static.block_kv
  grid = (batch, heads // static.group, q_len // bq, dims(static, k)[2] // bk)
  q_spec = seq_spec(static, bq, lambda i, j: i)
  kv_spec = seq_spec(static, bk, lambda i, j: j)
  in_specs = [q_spec, kv_spec, kv_spec, id_spec(bq, lambda i, j: i), id_spec(bk, lambda i, j: j)]
  out_specs = [q_spec, row_spec(static, bq, lambda i, j: i)]
  out_shape = [jax.ShapeDtypeStruct(q.shape, q.dtype),
               jax.ShapeDtypeStruct((batch, heads, 1, q_len), F32)]
  g = static.group
  scratch = [pltpu.VMEM((g, bq, LANES), F32), pltpu.VMEM((g, bq, LANES), F32),
             pltpu.VMEM((g, bq, static.d), F32)]
  kernel = functools.partial(_forward_kernel, static=static)
  return pallas("flash_dropout_fwd", kernel, grid, in_specs, out_specs, out_shape, scratch,
               static, kernel_cost(q, k, static, 2, q_arrays=2, k_arrays=2, rows=1, q_again=False),
               meta, q, k, v, id_rows(q_ids), id_rows(kv_ids))
