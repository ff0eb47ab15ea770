"""Multi-head attention (Vaswani et al. 2017, Sec. 3.2.2) with a KV cache for decoding.

The scaled dot-product itself is kernels.attention: one call, which picks the fused
kernel of the platform (splash on TPU, cuDNN on GPU) or the plain path, and whose
written-out reference is the semantics. The masks it takes (padding, causal, segment ids
for packed rows) are built with kernels/masks.py.

Conventions: queries/keys/values are [batch, length, heads, head_dim]; boolean masks
are True where attention is allowed and broadcast to [batch, heads, q_len, kv_len];
additive biases have the same layout and are added to the logits.
"""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from bert_jax import kernels
from bert_jax.layers import dense as dense_lib
from bert_jax.layers import rotary
from bert_jax.layers.config import TransformerConfig
from bert_jax.runtime import sharding

Array = jax.Array

# Logical names of the activations, pinned under a mesh (sharding.constrain): heads over
# `tensor` (as the projection kernels are), rows over the data axes.
QUERY = ("batch", "length", "heads", "kv")                   # [batch, q_len, heads, d]
KEY_VALUE = ("batch", "kv_length", "heads", "kv")            # [batch, kv_len, heads, d]


# -------------------------------------------------------------------- multi-head attention
class MultiHeadAttention(nn.Module):
  """Multi-head attention (Vaswani et al. 2017, Sec. 3.2.2) for self- and cross-attention.

  head_i = Attention(X W_i^Q, Y W_i^K, Y W_i^V); MultiHead = Concat(head_1..head_H) W^O.
  The per-head projections are stored as one DenseGeneral kernel [embed, heads, kv].
  With `config.decode`, self-attention keeps a KV cache in the "cache" collection, and
  cross-attention projects `inputs_kv` (the encoder output) on its first call with a
  mutable "cache" into `cross_key` / `cross_value` and reads them from there afterwards
  (`inputs_kv` must then be None: a new encoder output against a primed cache is an
  error, not silently ignored).
  """
  config: TransformerConfig
  causal: bool = False  # only used to build the mask while decoding with the cache
  cross: bool = False   # cross-attention: while decoding, inputs_kv may be None (cached K/V)

  @nn.compact
  def __call__(self, inputs_q: Array, inputs_kv: Array | None = None, mask: Array | None = None,
               bias: Array | None = None, positions: Array | None = None,
               kv_positions: Array | None = None, return_weights: bool = False):
    """inputs_q [batch, q_len, d_model]; inputs_kv [batch, kv_len, d_model] (None: self-attn).

    positions / kv_positions [batch, len] are used by rotary encodings only.
    Returns [batch, q_len, d_model]; with return_weights the attention matrix is sown
    into the "intermediates" collection as `attention_weights`.
    """
    cfg = self.config
    self_attention = inputs_kv is None and not self.cross
    inputs_kv = inputs_q if self_attention else inputs_kv
    dot_general = dense_lib.for_config(cfg)
    flat = not return_weights and splash_layout(cfg, inputs_q, inputs_kv, bias, mask)
    if flat:
      # Dots with a flat [.., heads * d] side: what dots_no_batch saves of them is then
      # not padded from d to 128 lanes on TPU (dense.flat; _saveable for the names).
      dot_general = dense_lib.flat(dot_general)
    dense = functools.partial(
        nn.DenseGeneral, axis=-1, features=(cfg.num_heads, cfg.d_head), use_bias=cfg.use_bias,
        dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
        dot_general=dot_general, kernel_init=cfg.kernel_init("embed", "heads", "kv"),
        bias_init=cfg.zeros_init("heads", "kv"))
    query = sharding.constrain(dense(name="query")(inputs_q), QUERY)  # [b, q_len, heads, d_k]
    query = _saveable(query, "query_proj", flat)  # remat policies save by name (stacks.py)
    if cfg.decode and not self_attention and self.has_variable("cache", "cross_key"):
      # Decoding: the encoder side is fixed, so its keys/values were projected once.
      if inputs_kv is not None:
        raise ValueError("decode got an encoder output but the decode cache already holds "
                         "cross_key/cross_value (projected from an earlier one): pass "
                         "encoded=None to use the cached ones, or start from a fresh cache.")
      key = _from_cache(self.get_variable("cache", "cross_key"))      # [b, kv, heads, d_k]
      value = _from_cache(self.get_variable("cache", "cross_value"))  # [b, kv, heads, d_v]
    else:
      if inputs_kv is None:
        raise ValueError("cross-attention needs inputs_kv (the encoder output) until its "
                         "keys/values are in the decode cache.")
      key = sharding.constrain(dense(name="key")(inputs_kv), KEY_VALUE)      # [b, kv, h, d_k]
      value = sharding.constrain(dense(name="value")(inputs_kv), KEY_VALUE)  # [b, kv, h, d_v]
      key, value = _saveable(key, "key_proj", flat), _saveable(value, "value_proj", flat)
      if cfg.decode and not self_attention and self.is_mutable_collection("cache"):
        self.put_variable("cache", "cross_key", _to_cache(key).astype(cfg.attention_dtype))
        self.put_variable("cache", "cross_value",
                          _to_cache(value).astype(cfg.attention_dtype))

    if cfg.position == "rotary":
      if positions is None:
        positions = jnp.arange(inputs_q.shape[1])[None]
      kv_positions = positions if (self_attention and kv_positions is None) else kv_positions
      if kv_positions is None:
        kv_positions = jnp.arange(inputs_kv.shape[1])[None]
      query = rotary.apply_rotary(query, positions, cfg.rotary_base)
      key = rotary.apply_rotary(key, kv_positions, cfg.rotary_base)

    impl = cfg.attention_impl
    if cfg.decode:  # a few queries against the cache: splash's blocks do not apply
      mask = kernels.as_dense(mask, query.shape[1], key.shape[1])
      impl = "xla" if impl in ("auto", "splash") else impl
    if cfg.decode and self_attention:
      key, value, mask = self._update_cache(key, value, mask)
      if bias is not None and bias.shape[-1] > key.shape[1]:
        bias = bias[..., :key.shape[1]]  # a relative bias built for max_len keys

    dropout_rng = None
    if not cfg.deterministic and cfg.attention_dropout_rate > 0.0:
      dropout_rng = self.make_rng("dropout")
    out = kernels.attention(
        query, key, value, bias, mask, dropout_rng, cfg.attention_dropout_rate,
        cfg.deterministic, cfg.attention_dtype, impl, return_weights)
    if return_weights:
      out, weights = out
      self.sow("intermediates", "attention_weights", weights)
    out = sharding.constrain(out, QUERY)
    # out: [batch, q_len, heads, d_v] -> W^O -> [batch, q_len, d_model]
    out = nn.DenseGeneral(
        features=inputs_q.shape[-1], axis=(-2, -1), use_bias=cfg.use_bias,
        dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
        dot_general=dot_general, kernel_init=cfg.kernel_init("heads", "kv", "embed"),
        bias_init=cfg.zeros_init("embed"), name="out")(out)      # [batch, q_len, d_model]
    return checkpoint_name(out, "out_proj")

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


def splash_layout(cfg, inputs_q: Array, inputs_kv: Array | None, bias, mask) -> bool:
  """Whether q/k/v are kept flat, [batch, len, heads * d], in their projections' dots and
  where the remat policies save them: only when d is not a multiple of TPU's 128 lanes
  and this attention will run splash's kernel (kernels.runs_splash, asked with the
  projections' shapes), not while decoding, nor for the written-out attention.

  Why: what a policy saves is stacked over the scanned layers, and XLA gives that stack
  the layout of its consumer. Splash reads [.., len, d] tiles, so with d = 64 each saved
  q/k/v would sit in 128-lane tiles half empty; flat, no dimension of 64 is left to pad
  (docs/performance.md, "q, k and v saved flat"). The price is a relayout of each q/k/v
  per layer into the kernel's tiles, which the other paths do not need.
  """
  if (cfg.decode or cfg.attention_impl == "reference" or cfg.d_head % kernels.LANES == 0):
    return False
  inputs_kv = inputs_q if inputs_kv is None else inputs_kv
  heads = (cfg.num_heads, cfg.d_head)
  query = jax.ShapeDtypeStruct(inputs_q.shape[:2] + heads, cfg.compute_dtype)
  value = jax.ShapeDtypeStruct(inputs_kv.shape[:2] + heads, cfg.compute_dtype)
  dropout = not cfg.deterministic and cfg.attention_dropout_rate > 0.0
  return kernels.runs_splash(cfg.attention_impl, query, value, bias, mask, dropout)


def _saveable(x: Array, name: str, flat: bool) -> Array:
  """x [batch, len, heads, d] tagged `name` for the remat policies; as [batch, len,
  heads * d] when `flat` (splash_layout)."""
  if not flat:
    return checkpoint_name(x, name)
  batch, length, heads, d = x.shape
  return checkpoint_name(x.reshape(batch, length, heads * d), name).reshape(x.shape)


# Decode caches keep keys/values heads-major, [batch, heads, len, d]: the operand layout
# of the attention's batched dots, so each step writes its entry in place and reads the
# cache without a per-step transposed copy of every layer's K and V.
def _to_cache(x: Array) -> Array:
  return jnp.swapaxes(x, 1, 2)     # [batch, len, heads, d] -> [batch, heads, len, d]


_from_cache = _to_cache           # the same swap back


def _cache_shape(x: Array) -> tuple[int, ...]:
  batch, length, heads, d = x.shape
  return (batch, heads, length, d)
