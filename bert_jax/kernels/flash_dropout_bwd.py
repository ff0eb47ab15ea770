"""The backward pass of kernels/flash_dropout.py: dq over key blocks and dk / dv over
query blocks, each recomputing the probabilities and the keep bits of its blocks; or, when
the queries and the keys are one block each (BERT's S128 and S512 rows), one kernel that
computes them once and gives dq, dk and dv together, taking O to form rowsum(dO * O)
itself rather than a pass of its own over dO and O before it."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bert_jax.kernels.flash_blocks import (F32, LANES, NN, NT, Static, as_column, as_row,
                                          dims, dropped, head, id_column, id_rows, id_spec,
                                          keep_bits, kernel_cost, masked, pallas, positions,
                                          put, row_spec, seq_spec)

Array = jax.Array


def backward(static: Static, residuals, d_out):
  q, k, v, q_ids, kv_ids, meta, out, lse = residuals
  d_out = d_out.astype(q.dtype)
  if dims(static, q)[2] == static.block_q and dims(static, k)[2] == static.block_kv:
    # di in the kernel, from the dO it reads anyway and O: one pass less over dO
    dq, dk, dv = _backward_one_block(q, k, v, d_out, lse, out, q_ids, kv_ids, meta, static)
  else:
    di = _di(static, d_out, out)
    dq = _backward_dq(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static)
    dk, dv = _backward_dkv(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static)
  return dq, dk, dv, None, None, None


def _di(static: Static, d_out, out):
  """rowsum(dO * O) per head, [b, h, 1, Q] float32: the softmax's correction term, dropout
  included (O is the dropped one)."""
  prod = d_out.astype(F32) * out.astype(F32)
  if static.packed:   # summed per head by a product with the heads' lane indicator: no
    # [.., heads, d] array (flash_blocks.py: layout) for the layout to copy into
    width = prod.shape[-1]
    heads = (jnp.arange(width)[:, None] // static.d == jnp.arange(width // static.d))
    return jnp.einsum("bsx,xh->bhs", prod, heads.astype(F32),
                      precision=lax.Precision.HIGHEST)[:, :, None]
  return jnp.sum(prod, axis=-1)[:, :, None, :]


def _dq_kernel(meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, q_ids_ref,
               kv_ids_ref, dq_ref, acc_ref, lse_col_ref, di_col_ref, *, static: Static):
  i, j = pl.program_id(2), pl.program_id(3)          # query block, key block
  bq, bk = q_ref.shape[0], k_ref.shape[0]

  @pl.when(j == 0)
  def _():
    acc_ref[...] = jnp.zeros(acc_ref.shape, F32)
    # Rows [1, bq] -> columns [bq, LANES], once per query block, not per key block.
    for t in range(static.group):
      lse_col_ref[t] = as_column(lse_ref[t])
      di_col_ref[t] = as_column(di_ref[t])

  q_pos, kv_pos = positions(i * bq, bq, 0), positions(j * bk, bk, 1)
  allowed = id_column(q_ids_ref) == kv_ids_ref[:1, :]
  for t in range(static.group):                      # the heads of the block
    k = head(static, k_ref, t)
    s = lax.dot_general(head(static, q_ref, t), k, NT, preferred_element_type=F32)
    s = masked(s * static.scale, allowed, q_pos, kv_pos, static)    # [bq, bk]
    p = jnp.exp(s - lse_col_ref[t][:, :1])
    dp = lax.dot_general(head(static, do_ref, t), head(static, v_ref, t), NT,
                         preferred_element_type=F32)
    if static.rate:
      dp = dropped(meta_ref, q_pos, kv_pos, static, t, dp) * (1.0 / (1.0 - static.rate))
    ds = p * (dp - di_col_ref[t][:, :1])
    acc_ref[t] += lax.dot_general(ds.astype(k.dtype), k, NN, preferred_element_type=F32)

  @pl.when(j == pl.num_programs(3) - 1)
  def _():
    for t in range(static.group):
      put(static, dq_ref, t, acc_ref[t] * static.scale)


def _transposed_block(meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, q_ids_ref,
                      kv_ids_ref, q_start, kv_start, static: Static):
  """Per head t of the block, (t, its q, k and dO [rows, d], kept probabilities, dS) of
  one [bk, bq] block in the transposed view, float32: the keys down the rows, so the
  per-query lse and di are rows. The dropped probabilities are unscaled; dS has
  dropout's 1 / (1 - rate) in it."""
  bq, bk = q_ref.shape[0], k_ref.shape[0]
  kv_pos, q_pos = positions(kv_start, bk, 0), positions(q_start, bq, 1)
  allowed = id_column(kv_ids_ref) == q_ids_ref[:1, :]
  for t in range(static.group):
    q, k, do = head(static, q_ref, t), head(static, k_ref, t), head(static, do_ref, t)
    s = lax.dot_general(k, q, NT, preferred_element_type=F32)
    s = masked(s * static.scale, allowed, q_pos, kv_pos, static)    # [bk, bq]
    p = jnp.exp(s - lse_ref[t])
    dp = lax.dot_general(head(static, v_ref, t), do, NT, preferred_element_type=F32)
    kept = p
    if static.rate:
      keep = keep_bits(meta_ref, q_pos, kv_pos, static, t)   # one hash for both products
      kept = jnp.where(keep, p, 0.0)
      dp = jnp.where(keep, dp, 0.0) * (1.0 / (1.0 - static.rate))
    yield t, (q, k, do), kept, p * (dp - di_ref[t])


def _dkv_kernel(meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, q_ids_ref,
                kv_ids_ref, dk_ref, dv_ref, dk_acc_ref, dv_acc_ref, *, static: Static):
  """The transposed view, [bk, bq]: the per-query lse and di are then rows."""
  j, i = pl.program_id(2), pl.program_id(3)          # key block, query block
  bq, bk = q_ref.shape[0], k_ref.shape[0]

  @pl.when(i == 0)
  def _():
    dk_acc_ref[...] = jnp.zeros(dk_acc_ref.shape, F32)
    dv_acc_ref[...] = jnp.zeros(dv_acc_ref.shape, F32)

  for t, (q, _, do), kept, ds in _transposed_block(
      meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, q_ids_ref, kv_ids_ref, i * bq,
      j * bk, static):
    dv_acc_ref[t] += lax.dot_general(kept.astype(do.dtype), do, NN, preferred_element_type=F32)
    dk_acc_ref[t] += lax.dot_general(ds.astype(q.dtype), q, NN, preferred_element_type=F32)

  @pl.when(i == pl.num_programs(3) - 1)
  def _():
    for t in range(static.group):
      put(static, dk_ref, t, dk_acc_ref[t] * static.scale)
      put(static, dv_ref, t, dv_acc_ref[t] * (1.0 / (1.0 - static.rate)))


def _backward_specs(static: Static, bq, bk, q_major: bool):
  """Block specs of (q, k / v, lse / di, q ids, kv ids) on a grid (b, h, outer, inner):
  the query blocks walk the outer axis (q_major) or the inner one."""
  q_block, kv_block = ((lambda x, y: x), (lambda x, y: y)) if q_major else (
      (lambda x, y: y), (lambda x, y: x))
  return (seq_spec(static, bq, q_block), seq_spec(static, bk, kv_block),
          row_spec(static, bq, q_block), id_spec(bq, q_block), id_spec(bk, kv_block))


def _grid(static: Static, q, k, q_major: bool):
  batch, heads, q_len = dims(static, q)
  q_blocks, kv_blocks = q_len // static.block_q, dims(static, k)[2] // static.block_kv
  inner = (q_blocks, kv_blocks) if q_major else (kv_blocks, q_blocks)
  return (batch, heads // static.group) + inner


def _backward_dq(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static: Static):
  bq, bk = static.block_q, static.block_kv
  q_spec, kv_spec, rows, q_ids_spec, kv_ids_spec = _backward_specs(static, bq, bk, True)
  in_specs = [q_spec, kv_spec, kv_spec, q_spec, rows, rows, q_ids_spec, kv_ids_spec]
  g = static.group
  scratch = [pltpu.VMEM((g, bq, static.d), F32), pltpu.VMEM((g, bq, LANES), F32),
             pltpu.VMEM((g, bq, LANES), F32)]
  kernel = functools.partial(_dq_kernel, static=static)
  return pallas("flash_dropout_dq", kernel, _grid(static, q, k, True), in_specs, q_spec,
               jax.ShapeDtypeStruct(q.shape, q.dtype), scratch, static,
               kernel_cost(q, k, static, 3, q_arrays=3, k_arrays=2, rows=2, q_again=False),
               meta, q, k, v, d_out, lse, di, id_rows(q_ids), id_rows(kv_ids))


def _backward_dkv(q, k, v, d_out, lse, di, q_ids, kv_ids, meta, static: Static):
  bq, bk = static.block_q, static.block_kv
  q_spec, kv_spec, rows, q_ids_spec, kv_ids_spec = _backward_specs(static, bq, bk, False)
  in_specs = [q_spec, kv_spec, kv_spec, q_spec, rows, rows, q_ids_spec, kv_ids_spec]
  out_shape = [jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)]
  g = static.group
  scratch = [pltpu.VMEM((g, bk, static.d), F32), pltpu.VMEM((g, bk, static.d), F32)]
  kernel = functools.partial(_dkv_kernel, static=static)
  return pallas("flash_dropout_dkv", kernel, _grid(static, q, k, False), in_specs,
               [kv_spec, kv_spec], out_shape, scratch, static,
               kernel_cost(q, k, static, 4, q_arrays=2, k_arrays=4, rows=2, q_again=True),
               meta, q, k, v, d_out, lse, di, id_rows(q_ids), id_rows(kv_ids))


def _one_block_kernel(meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, o_ref, q_ids_ref,
                      kv_ids_ref, dq_ref, dk_ref, dv_ref, *, static: Static):
  """dq, dk and dv of one (row, head block) whose queries and keys are one block each (di
  from its dO and O blocks): the dkv kernel's transposed view [bk, bq], with dq from the
  same dS (transposed once) instead of a second kernel that recomputes the scores,
  probabilities and keep bits."""
  di = [_di_row(static, do_ref, o_ref, t) for t in range(static.group)]
  for t, (q, k, do), kept, ds in _transposed_block(
      meta_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, di, q_ids_ref, kv_ids_ref, 0, 0,
      static):
    dv = lax.dot_general(kept.astype(do.dtype), do, NN, preferred_element_type=F32)
    put(static, dv_ref, t, dv * (1.0 / (1.0 - static.rate)))
    ds = ds.astype(q.dtype)                                  # [bk, bq]
    put(static, dk_ref, t, lax.dot_general(ds, q, NN, preferred_element_type=F32)
        * static.scale)
    put(static, dq_ref, t, lax.dot_general(ds.T, k, NN, preferred_element_type=F32)
        * static.scale)


def _di_row(static: Static, do_ref, o_ref, t: int) -> Array:
  """Head t's rowsum(dO * O) (see _di) as a row [1, rows], as the transposed view takes it."""
  return as_row(jnp.sum(head(static, do_ref, t).astype(F32)
                       * head(static, o_ref, t).astype(F32), axis=1, keepdims=True))


def _backward_one_block(q, k, v, d_out, lse, out, q_ids, kv_ids, meta, static: Static):
  q_len, kv_len = dims(static, q)[2], dims(static, k)[2]
  q_spec, kv_spec, rows, q_ids_spec, kv_ids_spec = _backward_specs(
      static, q_len, kv_len, False)
  in_specs = [q_spec, kv_spec, kv_spec, q_spec, rows, q_spec, q_ids_spec, kv_ids_spec]
  out_shape = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v)]
  kernel = functools.partial(_one_block_kernel, static=static)
  return pallas("flash_dropout_bwd", kernel, _grid(static, q, k, False), in_specs,
                [q_spec, kv_spec, kv_spec], out_shape, [], static,
                kernel_cost(q, k, static, 5, q_arrays=4, k_arrays=4, rows=1, q_again=False),
                meta, q, k, v, d_out, lse, out, id_rows(q_ids), id_rows(kv_ids))
