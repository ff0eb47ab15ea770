"""Attention: additive and multi-head; the masks (layers/masks.py) and the scaled
dot-product with its per-platform kernels (layers/dot_product.py) are re-exported here.

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

from bert_jax.runtime import parallel
from bert_jax.layers import positional
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers import dense as dense_lib
from bert_jax.layers import splash as splash_lib
# Re-exported: models, tests and the pictures import these names from here.
from bert_jax.layers.dot_product import (  # noqa: F401
    KEY_VALUE, QUERY, SCORES, describe_path, dot_product_attention, reference_attention,
    runs_cudnn, runs_splash)
from bert_jax.layers.masks import (  # noqa: F401
    MASK_VALUE, SegmentMask, add_causal, as_dense, attention_mask, causal_mask,
    combine_masks, padding_mask, row_mask, segment_mask)

_MASK_VALUE = MASK_VALUE

Array = jax.Array

# --------------------------------------------------------------------- additive attention
class AdditiveAttention(nn.Module):
  """Bahdanau et al. (2015): score(q, k) = v_a^T tanh(W_a [k; q]).

  W_a acts on the concatenation [k; q]; it is stored as one kernel [d_k + d_q, units]
  and applied as k W_a[:d_k] + q W_a[d_k:], which is the same product without
  materializing the [batch, q_len, kv_len, d_k + d_q] concatenation.
  """
  units: int
  dtype: str = "float32"

  @nn.compact
  def __call__(self, query: Array, keys: Array, values: Array, mask: Array | None = None):
    """query [batch, q_len, d_q], keys [batch, kv_len, d_k], values [batch, kv_len, d_v],
    mask [batch, q_len, kv_len] bool. Returns (context [batch, q_len, d_v],
    weights [batch, q_len, kv_len])."""
    d_k, d_q = keys.shape[-1], query.shape[-1]
    w_a = self.param("W_a", nn.with_logical_partitioning(
        nn.initializers.xavier_uniform(), ("embed", "mlp")), (d_k + d_q, self.units))
    v_a = self.param("v_a", nn.with_logical_partitioning(
        nn.initializers.normal(self.units ** -0.5), ("mlp",)), (self.units,))
    dtype = jnp.dtype(self.dtype)
    k_proj = keys.astype(dtype) @ w_a[:d_k].astype(dtype)    # [batch, kv_len, units]
    q_proj = query.astype(dtype) @ w_a[d_k:].astype(dtype)   # [batch, q_len, units]
    hidden = jnp.tanh(q_proj[:, :, None, :] + k_proj[:, None, :, :])  # [b, q, kv, units]
    scores = (hidden @ v_a.astype(dtype)).astype(jnp.float32)  # [batch, q_len, kv_len]
    if mask is not None:
      scores = jnp.where(mask, scores, MASK_VALUE)
    weights = jax.nn.softmax(scores, axis=-1)
    context = jnp.einsum("bqk,bkd->bqd", weights.astype(dtype), values.astype(dtype))
    return context, weights


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
    query = parallel.constrain(dense(name="query")(inputs_q), QUERY)  # [b, q_len, heads, d_k]
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
      key = parallel.constrain(dense(name="key")(inputs_kv), KEY_VALUE)      # [b, kv, h, d_k]
      value = parallel.constrain(dense(name="value")(inputs_kv), KEY_VALUE)  # [b, kv, h, d_v]
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
      query = positional.apply_rotary(query, positions, cfg.rotary_base)
      key = positional.apply_rotary(key, kv_positions, cfg.rotary_base)

    impl = cfg.attention_impl
    if cfg.decode:  # a few queries against the cache: splash's blocks do not apply
      mask = as_dense(mask, query.shape[1], key.shape[1])
      impl = "xla" if impl in ("auto", "splash") else impl
    if cfg.decode and self_attention:
      key, value, mask = self._update_cache(key, value, mask)
      if bias is not None and bias.shape[-1] > key.shape[1]:
        bias = bias[..., :key.shape[1]]  # a relative bias built for max_len keys

    use_weights = return_weights or cfg.attention_impl == "reference"
    dropout_rng = None
    if not cfg.deterministic and cfg.attention_dropout_rate > 0.0:
      dropout_rng = self.make_rng("dropout")
    if use_weights:
      out, weights = reference_attention(
          query, key, value, bias, mask, dropout_rng, cfg.attention_dropout_rate,
          cfg.deterministic, cfg.compute_dtype)
      if return_weights:
        self.sow("intermediates", "attention_weights", weights)
    else:
      out = dot_product_attention(
          query, key, value, bias, mask, dropout_rng, cfg.attention_dropout_rate,
          cfg.deterministic, cfg.attention_dtype, impl)
    out = parallel.constrain(out, QUERY)
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
  and this attention will run splash's kernel, as `runs_splash` decides it for the
  projections' shapes, the bias and the mask (not while decoding, nor for the
  written-out attention).

  Why: what a policy saves is stacked over the scanned layers, and XLA gives that stack
  the layout of its consumer. Splash reads [.., len, d] tiles, so with d = 64 each saved
  q/k/v sat in 128-lane tiles half empty: BERT-large's three stacks took 9 GiB per chip
  at 1024 rows for 4.5 GiB of values, and dots_no_batch's raw projection outputs the same
  (bench/RESULTS.md "Remat policies that keep the attention projections"). Flat, no
  dimension of 64 is left to pad. The price is a relayout of each q/k/v per layer into
  the kernel's tiles (HBM traffic), which the written-out attention (its stacks keep the
  length minor) and CPU never needed: there the projections stay as they were.
  """
  if (cfg.decode or cfg.attention_impl == "reference"
      or cfg.d_head % splash_lib.LANES == 0):
    return False
  inputs_kv = inputs_q if inputs_kv is None else inputs_kv
  heads = (cfg.num_heads, cfg.d_head)
  query = jax.ShapeDtypeStruct(inputs_q.shape[:2] + heads, cfg.compute_dtype)
  value = jax.ShapeDtypeStruct(inputs_kv.shape[:2] + heads, cfg.compute_dtype)
  dropout = not cfg.deterministic and cfg.attention_dropout_rate > 0.0
  return runs_splash(cfg.attention_impl, query, value, bias, mask, dropout)


def _saveable(x: Array, name: str, flat: bool) -> Array:
  """x [batch, len, heads, d] tagged `name` for the remat policies; as [batch, len,
  heads * d] when `flat` (splash_layout)."""
  if not flat:
    return checkpoint_name(x, name)
  batch, length, heads, d = x.shape
  return checkpoint_name(x.reshape(batch, length, heads * d), name).reshape(x.shape)


# Decode caches keep keys/values heads-major, [batch, heads, len, d], not in the
# [batch, len, heads, d] layout of the projections: that is the operand layout XLA:CPU's
# batched attention dots want, so the transposes below fold into them. Stored
# [batch, len, heads, d], every step copied each layer's whole K and V cache into a
# transposed buffer (4 copies a layer, ~13% of a greedy step of bench/decode.py: see
# bench/RESULTS.md "Decoding").
def _to_cache(x: Array) -> Array:
  return jnp.swapaxes(x, 1, 2)     # [batch, len, heads, d] -> [batch, heads, len, d]


_from_cache = _to_cache           # the same swap back


def _cache_shape(x: Array) -> tuple[int, ...]:
  batch, length, heads, d = x.shape
  return (batch, heads, length, d)
