"""Positional encodings: sinusoidal, learned absolute, rotary, T5 relative bias."""
from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.embedding import embedding
from bert_jax.layers.rotary import apply_rotary  # noqa: F401  (rotary lives beside attention)

Array = jax.Array


def sinusoidal_table(max_len: int, d_model: int) -> np.ndarray:
  """Vaswani et al. (2017) Sec. 3.5, exactly: [max_len, d_model] float32.

  PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
  Even and odd columns interleave, as in the formula (not sin and cos halves).
  """
  pos = np.arange(max_len, dtype=np.float64)[:, None]               # [max_len, 1]
  two_i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]       # [1, ceil(d/2)]
  angle = pos / np.power(10000.0, two_i / d_model)                  # [max_len, ceil(d/2)]
  table = np.zeros((max_len, d_model), dtype=np.float64)
  table[:, 0::2] = np.sin(angle)
  table[:, 1::2] = np.cos(angle[:, : d_model // 2])
  return table.astype(np.float32)


class SinusoidalPositionalEncoding(nn.Module):
  """Fixed sinusoidal encodings looked up at `positions` (no parameters)."""
  max_len: int
  features: int

  def __call__(self, positions: Array) -> Array:
    """positions [batch, len] int -> [batch, len, features] float32."""
    table = jnp.asarray(sinusoidal_table(self.max_len, self.features))
    return jnp.take(table, positions, axis=0)


class LearnedPositionalEmbedding(nn.Module):
  """BERT's learned absolute position table [max_len, d_model]."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, positions: Array) -> Array:
    cfg = self.config
    return embedding(cfg, cfg.max_len, "position", name="embedding")(positions)


def relative_position_bucket(relative_position: Array, bidirectional: bool = True,
                             num_buckets: int = 32, max_distance: int = 128) -> Array:
  """T5's bucketing of (key - query) distances: exact for small, logarithmic for large."""
  ret = 0
  n = -relative_position
  if bidirectional:
    num_buckets //= 2
    ret += (n < 0).astype(jnp.int32) * num_buckets
    n = jnp.abs(n)
  else:
    n = jnp.maximum(n, 0)
  max_exact = num_buckets // 2
  is_small = n < max_exact
  val_if_large = max_exact + (
      jnp.log(jnp.maximum(n, 1).astype(jnp.float32) / max_exact)
      / math.log(max_distance / max_exact) * (num_buckets - max_exact)).astype(jnp.int32)
  val_if_large = jnp.minimum(val_if_large, num_buckets - 1)
  return ret + jnp.where(is_small, n, val_if_large)


class RelativePositionBias(nn.Module):
  """T5-style learned scalar bias per (bucketed distance, head), added to attention logits."""
  config: TransformerConfig
  bidirectional: bool = True

  @nn.compact
  def __call__(self, q_len: int, k_len: int, query_offset: Array | int = 0) -> Array:
    """Returns [1, heads, q_len, k_len] float32. query_offset shifts query positions
    (the cache index while decoding)."""
    cfg = self.config
    table = self.param("rel_embedding", cfg.kernel_init("relpos_buckets", "heads"),
                       (cfg.relative_num_buckets, cfg.num_heads), cfg.params_dtype)
    q_pos = jnp.arange(q_len)[:, None] + query_offset        # [q_len, 1]
    k_pos = jnp.arange(k_len)[None, :]                        # [1, k_len]
    buckets = relative_position_bucket(k_pos - q_pos, self.bidirectional,
                                       cfg.relative_num_buckets, cfg.relative_max_distance)
    bias = jnp.take(table, buckets, axis=0)                   # [q_len, k_len, heads]
    return jnp.transpose(bias, (2, 0, 1))[None].astype(jnp.float32)
