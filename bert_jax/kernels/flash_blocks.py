"""What the flash_dropout kernels share (kernels/flash_dropout.py, the forward; and
flash_dropout_bwd.py, the backward): their static settings and block layout, the
pallas_call and its cost, and the in-kernel masking and dropout of a block of scores.

Layout. With d < 128 lanes (BERT's 64), a [batch, heads, len, d] array sits in half-empty
128-lane tiles: every q, k, v, output and gradient the kernels read or write, and each
projection that writes or reads one, moves twice its bytes. So where 128 // d heads side
by side fill the lanes (d divides 128 and each device's heads split into such groups),
the kernels take [batch, len, heads * d] as the projections give it (layers/dense.py's
FlatDense), one block holding `group` heads, each head's [rows, d] read and written at
its lanes' offset (head, put). Otherwise (d = 128 or more, which fills the
lanes alone; d = 96) they take [batch, heads, len, d], one head a block.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bert_jax.kernels import dropout_hash
from bert_jax.kernels import splash
from bert_jax.kernels.masks import MASK_VALUE

Array = jax.Array

LANES = splash.LANES
SUBLANES = 8           # ids are broadcast down a tile's sublanes (id_rows)
NT = (((1,), (1,)), ((), ()))   # a @ b.T
NN = (((1,), (0,)), ((), ()))   # a @ b
F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class Static:
  """What the kernels are specialised on (hashable: custom_vjp's nondiff argument)."""
  scale: float
  rate: float
  causal: bool
  window: int       # masks.SegmentMask.window: 0 global, else |q - kv| <= window
  block_q: int
  block_kv: int
  interpret: bool
  d: int = 0        # the head size
  group: int = 1    # heads per block; packed: the [batch, len, heads * d] layout
  packed: bool = False

  @property
  def lanes(self) -> int:
    return self.group * self.d


def heads_per_block(d: int, local_heads: int) -> int:
  """The heads of one block in the packed layout, 0 where it cannot be (see the top)."""
  group = LANES // d
  return group if d < LANES and LANES % d == 0 and local_heads % group == 0 else 0


def dims(static: Static, x: Array) -> tuple[int, int, int]:
  """(batch, heads, len) of a q / k / v block array in the static's layout."""
  if static.packed:
    return x.shape[0], x.shape[2] // static.d, x.shape[1]
  return x.shape[0], x.shape[1], x.shape[2]


def seq_spec(static: Static, size: int, block) -> pl.BlockSpec:
  """A q / k / v (or their gradients') BlockSpec on the grid (row, head block, x, y):
  `size` positions of `group` heads; block(x, y) picks the length block."""
  if static.packed:
    return pl.BlockSpec((None, size, static.lanes), lambda b, g, x, y, _: (b, block(x, y), g))
  return pl.BlockSpec((None, None, size, static.d),
                      lambda b, g, x, y, _: (b, g, block(x, y), 0))


def row_spec(static: Static, size: int, block) -> pl.BlockSpec:
  """The BlockSpec of per-query float32 rows [batch, heads, 1, len] (lse, di): [group, 1,
  size] a block."""
  return pl.BlockSpec((None, static.group, 1, size), lambda b, g, x, y, _: (b, g, 0, block(x, y)))


def id_rows(ids: Array) -> Array:
  """[batch, len] -> [batch, SUBLANES, len]: a block's ids along a tile's lanes, the form
  in which every kernel takes both sides' ids (id_column turns one into a column)."""
  return jnp.broadcast_to(ids[:, None, :], (ids.shape[0], SUBLANES, ids.shape[1]))


def id_spec(size: int, block) -> pl.BlockSpec:
  """The BlockSpec of id_rows' [SUBLANES, size] blocks on the grid (see seq_spec)."""
  return pl.BlockSpec((None, SUBLANES, size), lambda b, g, x, y, _: (b, 0, block(x, y)))


def pallas(name, kernel, grid, in_specs, out_specs, out_shape, scratch, static, cost, *args):
  return pl.pallas_call(
      kernel, out_shape=out_shape, name=name,   # named in profiles and the HLO
      grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=grid,
                                             in_specs=in_specs, out_specs=out_specs,
                                             scratch_shapes=scratch),
      # The last grid axis walks the other side's blocks into one accumulator.
      compiler_params=pltpu.CompilerParams(
          dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
      cost_estimate=cost, interpret=static.interpret)(*args)


def kernel_cost(q, k, static: Static, matmuls: int, q_arrays: int, k_arrays: int, rows: int,
                q_again: bool) -> pl.CostEstimate:
  """What XLA is told a kernel costs (it cannot see inside a custom call; the TPU
  compiler's estimate of the step, bert_jax/aot/cost.py, takes it as it is). Bytes:
  q_arrays arrays like q, k_arrays like k and `rows` float32 [b, h, q_len] statistics, the
  side that the grid's inner axis walks read once per block of the other side (q_again:
  the query side is re-read, else the key side); the ids' rows ([b, SUBLANES, len], a
  few bytes a position) left out."""
  batch, heads, q_len = dims(static, q)
  kv_len = dims(static, k)[2]
  elements = batch * heads * q_len * kv_len
  q_bytes = q_arrays * q.size * q.dtype.itemsize + rows * 4 * batch * heads * q_len
  k_bytes = k_arrays * k.size * k.dtype.itemsize
  if q_again:
    q_bytes *= kv_len // static.block_kv
  else:
    k_bytes *= q_len // static.block_q
  return pl.CostEstimate(flops=2 * matmuls * elements * static.d, transcendentals=elements,
                         bytes_accessed=int(q_bytes + k_bytes))



# ---------------------------------------------------------------------- in the kernels
def dropped(meta_ref, q_pos, kv_pos, static: Static, t: int, x: Array) -> Array:
  """x with the dropped elements 0 (kept ones unscaled): q_pos / kv_pos broadcast to
  x's shape, either way round; t: the head within the block."""
  return jnp.where(keep_bits(meta_ref, q_pos, kv_pos, static, t), x, 0.0)


def keep_bits(meta_ref, q_pos, kv_pos, static: Static, t: int) -> Array:
  """The keep bits of head t of a block (see dropped). Grid axes 0 and 1 are the local
  row and head block."""
  row = meta_ref[1] + pl.program_id(0)
  head = meta_ref[2] + pl.program_id(1) * static.group + t
  stream = dropout_hash.stream_word(meta_ref[0], row, head)
  return dropout_hash.keep(dropout_hash.query_word(stream, q_pos),
                           dropout_hash.key_word(kv_pos), static.rate)


def head(static: Static, ref, t: int) -> Array:
  """Head t's [rows, d] of a block: its lanes of a packed block, else the whole block."""
  return ref[:, pl.ds(t * static.d, static.d)] if static.group > 1 else ref[...]


def put(static: Static, ref, t: int, value: Array):
  """Writes head t's [rows, d] of an output block (see head)."""
  if static.group > 1:
    ref[:, pl.ds(t * static.d, static.d)] = value.astype(ref.dtype)
  else:
    ref[...] = value.astype(ref.dtype)


def masked(s: Array, allowed: Array, q_pos, kv_pos, static: Static) -> Array:
  if static.causal:
    allowed = jnp.logical_and(allowed, kv_pos <= q_pos)
  if static.window:   # |q - kv| <= window, as two comparisons (no integer abs needed)
    allowed = allowed & (q_pos - kv_pos <= static.window) & (kv_pos - q_pos <= static.window)
  return jnp.where(allowed, s, MASK_VALUE)


def id_column(ids_ref) -> Array:
  """A block of id_rows ([SUBLANES, n]) as a column [n, 1], by one transpose in VMEM.
  Taking the ids as rows alone keeps them [batch, SUBLANES, len] in HBM: broadcast across
  the lanes instead ([batch, len, LANES], 16 times the bytes), they were written by a
  broadcast, read by every kernel of every layer and copied in and out of VMEM."""
  return as_column(ids_ref[:1, :])[:, :1]


def as_column(row: Array) -> Array:
  """A row [1, n] as a column [n, LANES], the lanes all equal: one transpose in VMEM."""
  return jnp.broadcast_to(row, (LANES, row.shape[-1])).T


def as_row(column: Array) -> Array:
  """A column [n, 1] (or [n, LANES], the lanes all equal) as a row [1, n]: as_column's
  inverse."""
  return jnp.broadcast_to(column, (column.shape[0], LANES)).T[:1, :]


def positions(start, size: int, axis: int) -> Array:
  """Global positions start.. of a block, as a column (axis 0) or a row (axis 1)."""
  shape = (size, 1) if axis == 0 else (1, size)
  return start + lax.broadcasted_iota(jnp.int32, shape, axis)
