"""The decoder's attention: MultiHeadAttention with a KV cache in the "cache" collection.

Self-attention writes each step's keys and values at the cache index and attends over
what is written. Cross-attention projects `inputs_kv` (the encoder output) on its first
call with a mutable "cache" into `cross_key` / `cross_value` and reads them from there
afterwards (`inputs_kv` must then be None: a new encoder output against a primed cache is
an error, not silently ignored).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from bert_jax import kernels
from bert_jax.layers.attention import MultiHeadAttention

Array = jax.Array


class CachedAttention(MultiHeadAttention):
  """MultiHeadAttention that decodes through a KV cache when config.decode is set."""

  def keys_values(self, dense, inputs_kv: Array | None, flat: bool, self_attention: bool):
    cfg = self.config
    cross_decode = cfg.decode and not self_attention
    if cross_decode and self.has_variable("cache", "cross_key"):
      # Decoding: the encoder side is fixed, so its keys/values were projected once.
      if inputs_kv is not None:
        raise ValueError("decode got an encoder output but the decode cache already holds "
                         "cross_key/cross_value (projected from an earlier one): pass "
                         "encoded=None to use the cached ones, or start from a fresh cache.")
      return (_from_cache(self.get_variable("cache", "cross_key")),     # [b, kv, heads, d_k]
              _from_cache(self.get_variable("cache", "cross_value")))   # [b, kv, heads, d_v]
    key, value = super().keys_values(dense, inputs_kv, flat, self_attention)
    if cross_decode and self.is_mutable_collection("cache"):
      self.put_variable("cache", "cross_key", _to_cache(key).astype(cfg.attention_dtype))
      self.put_variable("cache", "cross_value", _to_cache(value).astype(cfg.attention_dtype))
    return key, value

  def with_cache(self, q_len: int, key: Array, value: Array, mask, bias,
                 self_attention: bool):
    cfg = self.config
    if not cfg.decode:
      return key, value, mask, bias, cfg.attention_impl
    # A few queries against the cache: splash's blocks do not apply.
    mask = kernels.as_dense(mask, q_len, key.shape[1])
    impl = "xla" if cfg.attention_impl in ("auto", "splash") else cfg.attention_impl
    if self_attention:
      key, value, mask = self._update_cache(key, value, mask)
      if bias is not None and bias.shape[-1] > key.shape[1]:
        bias = bias[..., :key.shape[1]]  # a relative bias built for max_len keys
    return key, value, mask, bias, impl

  def _update_cache(self, key: Array, value: Array, mask: Array | None):
    """Writes this step's keys/values at the cache index; masks keys not yet written.

    The cache is created (zeros, full length) when the "cache" collection is first
    initialized with a full-length input; each decode call then appends `q_len` entries.
    It is stored heads-major, [batch, heads, max_len, d] (see _to_cache): the write is then
    in place and the attention reads it without a per-step copy.
    """
    is_initialized = self.has_variable("cache", "cached_key")
    dtype = self.config.attention_dtype  # what the attention reads them as
    cached_key = self.variable("cache", "cached_key", jnp.zeros, _cache_shape(key), dtype)
    cached_value = self.variable("cache", "cached_value", jnp.zeros, _cache_shape(value), dtype)
    cache_index = self.variable("cache", "cache_index", lambda: jnp.array(0, dtype=jnp.int32))
    if not is_initialized:
      return key, value, mask
    max_len = cached_key.value.shape[2]
    q_len = key.shape[1]
    index = cache_index.value
    zero = jnp.zeros((), index.dtype)
    for var, new in ((cached_key, key), (cached_value, value)):
      var.value = jax.lax.dynamic_update_slice(            # [batch, heads, max_len, d]
          var.value, _to_cache(new).astype(var.value.dtype), (zero, zero, index, zero))
    cache_index.value = index + q_len
    query_pos = index + jnp.arange(q_len)                    # [q_len]
    key_pos = jnp.arange(max_len)                            # [max_len]
    written = key_pos[None, :] <= query_pos[:, None]         # causal over what is written
    cache_mask = written[None, None]                         # [1, 1, q_len, max_len]
    if mask is not None and mask.shape[-1] == max_len:
      cache_mask = cache_mask & mask                         # e.g. left-padded prompts
    return _from_cache(cached_key.value), _from_cache(cached_value.value), cache_mask


# Decode caches keep keys/values heads-major, [batch, heads, len, d]: the operand layout
# of the attention's batched dots, so each step writes its entry in place and reads the
# cache without a per-step transposed copy of every layer's K and V.
def _to_cache(x: Array) -> Array:
  return jnp.swapaxes(x, 1, 2)     # [batch, len, heads, d] -> [batch, heads, len, d]


_from_cache = _to_cache           # the same swap back


def _cache_shape(x: Array) -> tuple[int, ...]:
  batch, length, heads, d = x.shape
  return (batch, heads, length, d)
