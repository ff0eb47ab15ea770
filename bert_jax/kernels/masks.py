"""Attention masks: bools broadcast to [batch, heads, q_len, kv_len] (True where attention
is allowed), and `SegmentMask`, the same masks kept as segment ids, which the fused kernels
take without the [batch, 1, q_len, kv_len] bools (splash: segment ids; cuDNN: sequence
lengths and its causal mask type, kernels/cudnn.py), with an optional sliding window."""
from __future__ import annotations

import functools
from typing import Optional

import flax
import jax
import jax.numpy as jnp

Array = jax.Array

# Finite "minus infinity": a fully masked row then gives a uniform softmax, never NaN.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


def padding_mask(input_mask: Array) -> Array:
  """[batch, len] 1/0 -> [batch, 1, 1, len] bool: every query may attend to real keys."""
  return input_mask.astype(bool)[:, None, None, :]


def attention_mask(query_mask: Array, key_mask: Array) -> Array:
  """[batch, q_len], [batch, kv_len] -> [batch, 1, q_len, kv_len]: both positions real."""
  return query_mask.astype(bool)[:, None, :, None] & key_mask.astype(bool)[:, None, None, :]


def causal_mask(length: int) -> Array:
  """[1, 1, len, len] bool: position i attends to j <= i."""
  return jnp.tril(jnp.ones((length, length), dtype=bool))[None, None]


def segment_mask(query_segments: Array, key_segments: Array | None = None) -> Array:
  """Block-diagonal mask for packed sequences: attend only within the same segment id.

  [batch, q_len], [batch, kv_len] -> [batch, 1, q_len, kv_len]. Segment id 0 is padding
  and matches nothing, so padded queries see no key (their output is masked downstream).
  """
  key_segments = query_segments if key_segments is None else key_segments
  same = query_segments[:, None, :, None] == key_segments[:, None, None, :]
  return same & (key_segments[:, None, None, :] > 0)


@flax.struct.dataclass
class SegmentMask:
  """A mask kept as segment ids: query i may attend key j when q_ids[i] == kv_ids[j] > 0
  (and j <= i when causal), i.e. `segment_mask` (& `causal_mask`) without the
  [batch, 1, q_len, kv_len] bools, which splash attention (kernels/splash.py) never builds.

  q_ids [batch, q_len] / kv_ids [batch, kv_len] int; q_ids None: every query (a key
  padding mask: kv_ids = input_mask); both None: no mask beyond `causal`. Every mask a
  model builds outside decoding has this form; `dense` gives the bools for other paths.
  """
  q_ids: Optional[Array] = None
  kv_ids: Optional[Array] = None
  causal: bool = flax.struct.field(pytree_node=False, default=False)
  window: int = flax.struct.field(pytree_node=False, default=0)  # kernels/window.py

  def dense(self, q_len: int, kv_len: int) -> Optional[Array]:
    """The same mask as bools broadcastable to [batch, 1, q_len, kv_len] (None: none)."""
    mask = None
    if self.kv_ids is not None:
      mask = (padding_mask(self.kv_ids > 0) if self.q_ids is None
              else segment_mask(self.q_ids, self.kv_ids))
    if self.causal:
      mask = combine_masks(jnp.tril(jnp.ones((q_len, kv_len), bool))[None, None], mask)
    if self.window:
      distance = jnp.arange(q_len)[:, None] - jnp.arange(kv_len)[None, :]
      mask = combine_masks((jnp.abs(distance) <= self.window)[None, None], mask)
    return mask


def as_dense(mask, q_len: int, kv_len: int) -> Optional[Array]:
  """A SegmentMask as bools (see SegmentMask.dense); a bool mask or None as it is."""
  return mask.dense(q_len, kv_len) if isinstance(mask, SegmentMask) else mask


def row_mask(input_mask: Array | None = None,
             packed_segment_ids: Array | None = None) -> SegmentMask | None:
  """Self-attention over a row as segment ids: real keys only (input_mask [batch, len]),
  and with packed rows only those of the query's document (packed_segment_ids, 0 = pad).
  The same mask as padding_mask(input_mask) & segment_mask(packed_segment_ids)."""
  if packed_segment_ids is None:
    return None if input_mask is None else SegmentMask(None, input_mask)
  keys = packed_segment_ids if input_mask is None else packed_segment_ids * (input_mask > 0)
  return SegmentMask(packed_segment_ids, keys)


def add_causal(mask, length: int):
  """mask AND causal: a SegmentMask (or None) stays ids with causal set; bools are combined."""
  if mask is None or isinstance(mask, SegmentMask):
    return (mask or SegmentMask()).replace(causal=True)
  return combine_masks(causal_mask(length), mask)


def combine_masks(*masks: Optional[Array]) -> Optional[Array]:
  """Logical AND of the given masks (None entries ignored); None if all are None."""
  masks = [m for m in masks if m is not None]
  if not masks:
    return None
  return functools.reduce(jnp.logical_and, masks)
