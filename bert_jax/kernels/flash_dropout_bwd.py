"""The backward pass of kernels/flash_dropout.py: dq over key blocks and dk / dv over
query blocks, each recomputing the probabilities and the keep bits of its blocks; or, when
the queries and the keys are one block each (BERT's S128 and S512 rows), one kernel that
computes them once and gives dq, dk and dv together."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bert_jax.kernels.flash_blocks import (F32, LANES, NN, NT, SUBLANES, Static, dropped,
                                          id_columns, id_rows, keep_bits, kernel_cost,
                                          masked, pallas, positions)

Array = jax.Array


def backward(static: Static, residuals, d_out):
  q, k, v, q_ids, kv_ids, meta, out, lse = residuals
  # rowsum(dO * O): the softmax's correction term, dropout included (O is the dropped one).
  di = jnp.sum(d_out.astype(F32) * out.astype(F32), axis=-1)[:, :, None, :]
  d_out = d_out.astype(q.dtype)
  if q.shape[2] == static.block_q and k.shape[2] == static.block_kv:
    dq, dk, dv = _backward_one_block(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static)
  else:
    dq = _backward_dq(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static)
    dk, dv = _backward_dkv(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static)
  return dq, dk, dv, None, None, None


def _dq_kernel(meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, q_ids_ref,
               kv_ids_ref, dq_ref, acc_ref, lse_col_ref, di_col_ref, *, static: Static):
  i, j = pl.program_id(2), pl.program_id(3)          # query block, key block
  bq, bk = q_ref.shape[0], k_ref.shape[0]

  @pl.when(j == 0)
  def _():
    acc_ref[...] = jnp.zeros(acc_ref.shape, F32)
    # Rows [1, bq] -> columns [bq, LANES], once per query block, not per key block.
    lse_col_ref[...] = jnp.broadcast_to(lse_ref[...], (LANES, bq)).T
    di_col_ref[...] = jnp.broadcast_to(di_ref[...], (LANES, bq)).T

  q_pos, kv_pos = positions(i * bq, bq, 0), positions(j * bk, bk, 1)
  s = lax.dot_general(q_ref[...], k_ref[...], NT, preferred_element_type=F32)
  s = masked(s * static.scale, q_ids_ref[:, :1] == kv_ids_ref[:1, :], q_pos, kv_pos,
              static)                                        # [bq, bk]
  p = jnp.exp(s - lse_col_ref[:, :1])
  dp = lax.dot_general(do_ref[...], v_ref[...], NT, preferred_element_type=F32)
  if static.rate:
    dp = dropped(meta_ref, q_pos, kv_pos, static.rate, dp) * (1.0 / (1.0 - static.rate))
  ds = p * (dp - di_col_ref[:, :1])
  acc_ref[...] += lax.dot_general(ds.astype(k_ref.dtype), k_ref[...], NN,
                                  preferred_element_type=F32)

  @pl.when(j == pl.num_programs(3) - 1)
  def _():
    dq_ref[...] = (acc_ref[...] * static.scale).astype(dq_ref.dtype)


def _transposed_block(meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, q_ids_ref,
                      kv_ids_ref, q_start, kv_start, static: Static):
  """(kept probabilities, dS) of one [bk, bq] block in the transposed view, float32: the
  keys down the rows, so the per-query lse and di are rows. The dropped probabilities are
  unscaled; dS has dropout's 1 / (1 - rate) in it."""
  bq, bk = q_ref.shape[0], k_ref.shape[0]
  kv_pos, q_pos = positions(kv_start, bk, 0), positions(q_start, bq, 1)
  s = lax.dot_general(k_ref[...], q_ref[...], NT, preferred_element_type=F32)
  s = masked(s * static.scale, kv_ids_ref[:, :1] == q_ids_ref[:1, :], q_pos, kv_pos,
             static)                                         # [bk, bq]
  p = jnp.exp(s - lse_ref[...])
  dp = lax.dot_general(v_ref[...], do_ref[...], NT, preferred_element_type=F32)
  kept = p
  if static.rate:
    keep = keep_bits(meta_ref, q_pos, kv_pos, static.rate)   # one hash for both products
    kept = jnp.where(keep, p, 0.0)
    dp = jnp.where(keep, dp, 0.0) * (1.0 / (1.0 - static.rate))
  return kept, p * (dp - di_ref[...])


def _dkv_kernel(meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, q_ids_ref,
                kv_ids_ref, dk_ref, dv_ref, dk_acc_ref, dv_acc_ref, *, static: Static):
  """The transposed view, [bk, bq]: the per-query lse and di are then rows."""
  j, i = pl.program_id(2), pl.program_id(3)          # key block, query block
  bq, bk = q_ref.shape[0], k_ref.shape[0]

  @pl.when(i == 0)
  def _():
    dk_acc_ref[...] = jnp.zeros(dk_acc_ref.shape, F32)
    dv_acc_ref[...] = jnp.zeros(dv_acc_ref.shape, F32)

  kept, ds = _transposed_block(meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref,
                               q_ids_ref, kv_ids_ref, i * bq, j * bk, static)
  dv_acc_ref[...] += lax.dot_general(kept.astype(do_ref.dtype), do_ref[...], NN,
                                     preferred_element_type=F32)
  dk_acc_ref[...] += lax.dot_general(ds.astype(q_ref.dtype), q_ref[...], NN,
                                     preferred_element_type=F32)

  @pl.when(i == pl.num_programs(3) - 1)
  def _():
    dk_ref[...] = (dk_acc_ref[...] * static.scale).astype(dk_ref.dtype)
    dv_ref[...] = (dv_acc_ref[...] * (1.0 / (1.0 - static.rate))).astype(dv_ref.dtype)


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


def _backward_dq(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static: Static):
  batch, heads, q_len, d = q.shape
  bq, bk = static.block_q, static.block_kv
  q_spec, kv_spec, row_spec, at = _backward_specs(q, k, bq, bk, q_major=True)
  in_specs = [q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec,
              pl.BlockSpec((None, bq, LANES), at(lambda b, h, i, j: (b, i, 0))),
              pl.BlockSpec((None, SUBLANES, bk), at(lambda b, h, i, j: (b, 0, j)))]
  scratch = [pltpu.VMEM((bq, d), F32), pltpu.VMEM((bq, LANES), F32),
             pltpu.VMEM((bq, LANES), F32)]
  kernel = functools.partial(_dq_kernel, static=static)
  grid = (batch, heads, q_len // bq, k.shape[2] // bk)
  return pallas("flash_dropout_dq", kernel, grid, in_specs, q_spec,
               jax.ShapeDtypeStruct(q.shape, q.dtype), scratch, static,
               kernel_cost(q, k, static, 3, q_arrays=3, k_arrays=2, rows=2, q_again=False),
               meta, q, k, v, d_out, lse, di, id_columns(q_ids), id_rows(kv_ids))


def _backward_dkv(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static: Static):
  batch, heads, q_len, d = q.shape
  bq, bk = static.block_q, static.block_kv
  q_spec, kv_spec, row_spec, at = _backward_specs(q, k, bq, bk, q_major=False)
  in_specs = [q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec,
              pl.BlockSpec((None, SUBLANES, bq), at(lambda b, h, i, j: (b, 0, i))),
              pl.BlockSpec((None, bk, LANES), at(lambda b, h, i, j: (b, j, 0)))]
  out_shape = [jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)]
  scratch = [pltpu.VMEM((bk, d), F32), pltpu.VMEM((bk, d), F32)]
  kernel = functools.partial(_dkv_kernel, static=static)
  grid = (batch, heads, k.shape[2] // bk, q_len // bq)
  return pallas("flash_dropout_dkv", kernel, grid, in_specs, [kv_spec, kv_spec], out_shape,
               scratch, static,
               kernel_cost(q, k, static, 4, q_arrays=2, k_arrays=4, rows=2, q_again=True),
               meta, q, k, v, d_out, lse, di, id_rows(q_ids),
               id_columns(kv_ids))


def _one_block_kernel(meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, q_ids_ref,
                      kv_ids_ref, dq_ref, dk_ref, dv_ref, *, static: Static):
  """dq, dk and dv of one (row, head) whose queries and keys are one block each: the
  dkv kernel's transposed view [bk, bq], with dq from the same dS (transposed once)
  instead of a second kernel that recomputes the scores, probabilities and keep bits."""
  kept, ds = _transposed_block(meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref,
                               q_ids_ref, kv_ids_ref, 0, 0, static)
  dv = lax.dot_general(kept.astype(do_ref.dtype), do_ref[...], NN, preferred_element_type=F32)
  dv_ref[...] = (dv * (1.0 / (1.0 - static.rate))).astype(dv_ref.dtype)
  ds = ds.astype(q_ref.dtype)                                # [bk, bq]
  dk = lax.dot_general(ds, q_ref[...], NN, preferred_element_type=F32)
  dk_ref[...] = (dk * static.scale).astype(dk_ref.dtype)
  dq = lax.dot_general(ds.T, k_ref[...], NN, preferred_element_type=F32)
  dq_ref[...] = (dq * static.scale).astype(dq_ref.dtype)


def _backward_one_block(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static: Static):
  batch, heads, q_len, _ = q.shape
  kv_len = k.shape[2]
  q_spec, kv_spec, row_spec, at = _backward_specs(q, k, q_len, kv_len, q_major=False)
  in_specs = [q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec,
              pl.BlockSpec((None, SUBLANES, q_len), at(lambda b, h, i, j: (b, 0, i))),
              pl.BlockSpec((None, kv_len, LANES), at(lambda b, h, i, j: (b, j, 0)))]
  out_shape = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v)]
  kernel = functools.partial(_one_block_kernel, static=static)
  return pallas("flash_dropout_bwd", kernel, (batch, heads, 1, 1), in_specs,
                [q_spec, kv_spec, kv_spec], out_shape, [], static,
                kernel_cost(q, k, static, 5, q_arrays=3, k_arrays=4, rows=2, q_again=False),
                meta, q, k, v, d_out, lse, di, id_rows(q_ids), id_columns(kv_ids))
