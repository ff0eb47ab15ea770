"""Splash attention: the Pallas flash-attention kernel for TPU, under shard_map.

`jax.experimental.pallas.ops.tpu.splash_attention` computes softmax(QK^T)V block by block
(online softmax), so the [batch, heads, q_len, kv_len] scores and probabilities never sit
in HBM, forward or backward (it saves only the output and a log-sum-exp per query). Its
masks are a static per-head pattern (full, causal or local here) AND segment ids (q_id ==
kv_id), which is why models pass `kernels.masks.SegmentMask` rather than bools. A sliding
window (SegmentMask.window w) is splash's LocalMask, window (w, w), or (w, 0) when causal:
the blocks (block_size's) wholly outside the band are skipped, forward and backward. Those
kernels run in a named scope, `local_window_scope(w)`, which the compiled HLO keeps in
their metadata (splash_windows_in_hlo reads it back).

A Mosaic kernel cannot be partitioned by XLA's SPMD partitioner, so on a mesh it runs in
`jax.shard_map`: rows over the batch axes (data, fsdp) and heads over `tensor`, as the
logical rules in runtime/sharding.py map "batch" and "heads"; each device sees whole sequences, so
attention needs no collective at all. On CPU the same kernel runs in Pallas interpret
mode (tests/kernels/test_splash.py checks it against the reference).

What it needs: lengths in blocks of 128 positions (shorter or ragged lengths are padded
here, the padding masked, so S=100 costs what S=128 does); no additive bias (relative
position biases); no attention dropout (the kernel has none: kernels/flash_dropout.py is
the kernel with it, split and padded by the helpers here); num_heads divisible by the
tensor axis and the batch by data x fsdp. `unsupported` names what is missing.
"""
from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as splash
from jax.sharding import PartitionSpec as P

from bert_jax.runtime import sharding
from bert_jax.runtime import tracing

Array = jax.Array

LANES = 128       # the kernel's key-block granularity: lengths are padded to a multiple
MAX_BLOCK = 512   # the largest block tried (MaxText's TPU default); VMEM, not HBM
_PAD_Q_ID = -2    # segment ids of padded positions: never equal to each other or to a real id
_PAD_KV_ID = -3
_NO_KEY_ID = -1   # kv id 0 (padding) matches no query, as in masks.segment_mask


def unsupported(query: Array, value: Array, bias, bool_mask, dropout_active: bool) -> str:
  """Why splash cannot compute this attention here ("" when it can). bool_mask: a mask
  given as bools (not as a masks.SegmentMask), which splash cannot take."""
  if dropout_active:
    return ("it has no attention dropout: set model.attention_dropout_rate=0 (or "
            "model.attention_impl='flash_dropout', the fused kernel that has it)")
  return fused_unsupported(query, value, bias, bool_mask)


def fused_unsupported(query: Array, value: Array, bias, bool_mask) -> str:
  """What the Pallas kernels run this way (splash; kernels/flash_dropout.py, which has
  attention dropout) need that this attention lacks, dropout aside: "" when nothing."""
  if bias is not None:
    return ("it takes no additive bias (model.position='relative'): use "
            "model.attention_impl='xla'")
  if bool_mask is not None:
    return (f"it needs the mask as segment ids (masks.SegmentMask), not bools of shape "
            f"{tuple(bool_mask.shape)}")
  if query.shape[-1] != value.shape[-1]:
    return f"it needs d_k == d_v, got {query.shape[-1]} and {value.shape[-1]}"
  platform = tracing.trace_platform()
  if platform not in ("tpu", "cpu"):
    return f"it is a TPU kernel (interpreted on CPU), not one for {platform}"
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    # Unsharded: fine on one device; on several (an init jitted without the mesh) the
    # partitioner would have to split the kernel, which it cannot.
    return "" if jax.device_count() == 1 or platform == "cpu" else (
        "it must run under a mesh (tracing.traced_on) on several devices")
  batch_ways = _ways(mesh, "batch")
  head_ways = _ways(mesh, "heads")
  if query.shape[0] % batch_ways:
    return f"batch {query.shape[0]} does not split over {batch_ways} data-parallel devices"
  if query.shape[2] % head_ways:
    return (f"model.num_heads={query.shape[2]} does not split over the tensor axis "
            f"({head_ways} ways)")
  return ""


def head_ways() -> int:
  """Over how many devices the heads split under the abstract mesh (1 without one)."""
  mesh = jax.sharding.get_abstract_mesh()
  return 1 if mesh.empty else _ways(mesh, "heads")


def _ways(mesh, logical: str) -> int:
  return math.prod(mesh.shape[a] for a in _axes(logical))


def _axes(logical: str) -> tuple[str, ...]:
  """The mesh axes a logical name maps to under sharding.LOGICAL_RULES."""
  axes = dict(sharding.LOGICAL_RULES)[logical]
  return (axes,) if isinstance(axes, str) else tuple(axes or ())


def block_size(length: int) -> int:
  """The largest of 512 / 256 / 128 dividing `length` (a multiple of 128)."""
  return next(b for b in (MAX_BLOCK, MAX_BLOCK // 2, LANES) if length % b == 0)


def pad_to_lanes(x: Array, axis: int, fill=0) -> Array:
  pad = -x.shape[axis] % LANES
  if not pad:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, pad)
  return jnp.pad(x, widths, constant_values=fill)


def segment_ids(mask, batch: int, q_len: int, kv_len: int):
  """(q ids [batch, q_len], kv ids [batch, kv_len]) int32 for the kernel, or None when
  nothing but the static mask applies and no padding is needed."""
  q_ids = None if mask is None else mask.q_ids
  kv_ids = None if mask is None else mask.kv_ids
  if q_ids is None and kv_ids is None and not (q_len % LANES or kv_len % LANES):
    return None
  q_ids = jnp.ones((batch, q_len), jnp.int32) if q_ids is None else q_ids.astype(jnp.int32)
  kv_ids = (jnp.ones((batch, kv_len), jnp.int32) if kv_ids is None
            else jnp.where(kv_ids > 0, kv_ids, _NO_KEY_ID).astype(jnp.int32))
  return pad_to_lanes(q_ids, 1, _PAD_Q_ID), pad_to_lanes(kv_ids, 1, _PAD_KV_ID)


def static_mask(shape: tuple[int, int], causal: bool, window: int):
  """Splash's mask for one head of a (padded) [q_len, kv_len] block: full, causal, or the
  band |i - j| <= window (only j <= i when causal). On padded lengths the band is still
  on the real positions (the padding comes last) and the ids mask the padding."""
  if window:
    return splash.LocalMask(shape, window_size=(window, 0 if causal else window), offset=0)
  return splash.CausalMask(shape) if causal else splash.FullMask(shape)


def local_window_scope(window: int) -> str:
  """The named scope of the kernels of a sliding-window layer: "splash_local_window_64"."""
  return f"splash_local_window_{window}"


def splash_windows_in_hlo(text: str) -> dict[int, int]:
  """{window: number of splash kernel calls} in compiled HLO text (`compiled.as_text()`;
  a lowered program's text keeps no op names by default): 0 counts the global kernels,
  w those run under local_window_scope(w); forward and backward kernels alike. Shows
  that a model's local layers take the local kernel (a kernel in a scanned stack of
  layers is one call however many layers the scan runs)."""
  found: dict[int, int] = {}
  # One HLO instruction per chunk: a kernel's metadata may span several lines.
  for instruction in re.split(r"\n\s*(?:ROOT )?%", text):
    if 'custom_call_target="tpu_custom_call"' not in instruction:
      continue
    op_name = re.search(r'metadata=\{op_name="([^"]*)"', instruction)
    if op_name is None or "splash_mha_" not in op_name.group(1):
      continue
    window = re.search(r"splash_local_window_(\d+)/", op_name.group(1))
    w = int(window.group(1)) if window else 0
    found[w] = found.get(w, 0) + 1
  return found


def _local_attention(q: Array, k: Array, v: Array, ids, *, causal: bool, window: int,
                     interpret: bool) -> Array:
  """One device's rows and heads: q [b, h, Q, d], k/v [b, h, K, d] with Q, K multiples
  of 128 -> [b, h, Q, d]. The kernel takes one row, so it is vmapped over b."""
  heads, q_len, kv_len = q.shape[1], q.shape[2], k.shape[2]
  static = static_mask((q_len, kv_len), causal, window)
  bq, bkv = block_size(q_len), block_size(kv_len)
  blocks = splash.BlockSizes(block_q=bq, block_kv=bkv, block_kv_compute=bkv,
                             block_q_dkv=bq, block_kv_dkv=bkv, block_kv_dkv_compute=bkv,
                             use_fused_bwd_kernel=True)
  kernel = splash.make_splash_mha(splash.MultiHeadMask([static] * heads), block_sizes=blocks,
                                  head_shards=1, q_seq_shards=1, interpret=interpret)
  if window:   # named, so that the HLO tells a local layer's kernel from a global one's
    with jax.named_scope(local_window_scope(window)):
      return _run(kernel, q, k, v, ids)
  return _run(kernel, q, k, v, ids)


def _run(kernel, q, k, v, ids):
  if ids is None:
    return jax.vmap(kernel)(q, k, v)
  return jax.vmap(kernel)(q, k, v, splash.SegmentIds(*ids))


def splash_attention(query: Array, key: Array, value: Array, mask=None,
                     dtype=jnp.bfloat16) -> Array:
  """softmax(Q K^T / sqrt(d) + mask) V by the splash kernel. Check `unsupported` first.

  Args:
    query: [batch, q_len, heads, d]; key, value: [batch, kv_len, heads, d].
    mask: a masks.SegmentMask (its window included) or None (every key).

  Returns:
    [batch, q_len, heads, d] in `dtype`. A query with no allowed key (a padded one)
    averages the values its blocks hold, where the XLA path averages all of them: such
    rows are padding, never read.
  """
  batch, q_len, _, d = query.shape
  kv_len = key.shape[1]
  causal = mask is not None and mask.causal
  window = 0 if mask is None else mask.window
  ids = segment_ids(mask, batch, q_len, kv_len)
  # The kernel does not scale the logits; scaling q first is the same product.
  q = (query * (1.0 / math.sqrt(d))).astype(dtype)
  # [batch, len, heads, d] -> [batch, heads, len, d], the lengths padded to the lanes.
  q = pad_to_lanes(q.transpose(0, 2, 1, 3), 2)
  k = pad_to_lanes(key.astype(dtype).transpose(0, 2, 1, 3), 2)
  v = pad_to_lanes(value.astype(dtype).transpose(0, 2, 1, 3), 2)

  interpret = tracing.trace_platform() == "cpu"
  def local(q, k, v, *ids):
    return _local_attention(q, k, v, ids or None, causal=causal, window=window,
                            interpret=interpret)

  out = shard_rows_and_heads(local, (q, k, v), ids or ())   # [batch, heads, Q_pad, d]
  return out[:, :, :q_len].transpose(0, 2, 1, 3)


def shard_rows_and_heads(local, blocks, rows=(), replicated=(), offsets: bool = False,
                         packed_d: int = 0):
  """local(*blocks, *rows, *replicated) -> an array laid out as the blocks, on each
  device's rows and heads under the abstract mesh (the splitting described at the top),
  else whole.

  blocks: [batch, heads, len, d] arrays, or [batch, len, heads * packed_d] ones with
  packed_d (the output is split as they are); rows: [batch, len] arrays (segment ids);
  replicated: whole on every device (a dropout seed). With
  `offsets`, local also gets int32 [2]: the global index of its first row and first head
  ((0, 0) without a mesh), for what must not depend on the split (dropout bits).
  """
  args = (*blocks, *rows, *replicated)
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return local(*args, jnp.zeros((2,), jnp.int32)) if offsets else local(*args)
  row_axes, head_axes = _axes("batch"), _axes("heads")

  def on_device(*args):
    if not offsets:
      return local(*args)
    batch = args[0].shape[0]                     # this device's rows and heads
    heads = args[0].shape[2] // packed_d if packed_d else args[0].shape[1]
    first = jnp.stack([_index(row_axes) * batch, _index(head_axes) * heads])
    return local(*args, first.astype(jnp.int32))

  block_spec = (P(row_axes or None, None, head_axes or None) if packed_d  # [b, len, h * d]
                else P(row_axes or None, head_axes or None, None, None))  # [b, h, len, d]
  in_specs = ((block_spec,) * len(blocks) + (P(row_axes or None, None),) * len(rows)
              + (P(),) * len(replicated))
  return jax.shard_map(on_device, mesh=mesh, in_specs=in_specs, out_specs=block_spec,
                       check_vma=False)(*args)


def _index(axes: tuple[str, ...]):
  """This device's index along the mesh axes `axes` (major to minor, as a PartitionSpec
  entry splits an array over them) inside shard_map; 0 over no axes."""
  return jax.lax.axis_index(axes) if axes else jnp.int32(0)
