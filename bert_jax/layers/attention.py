"""Multi-head attention (Vaswani et al. 2017, Sec. 3.2.2): projections, rotary, the kernel.

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
  Decoding with a KV cache is the subclass in layers/kv_cache.py.
  """
  config: TransformerConfig
  causal: bool = False  # a decoder's self-attention (its cache masks what is unwritten)
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
    # Where a TPU kernel runs with d < 128: q/k/v and W^O flat, [.., heads * d] (FlatDense)
    flat = not return_weights and splash_layout(cfg, inputs_q, inputs_kv, bias, mask)
    dense = functools.partial(
        dense_lib.FlatDense if flat else nn.DenseGeneral, axis=-1,
        features=(cfg.num_heads, cfg.d_head), use_bias=cfg.use_bias,
        dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
        dot_general=dot_general, kernel_init=cfg.kernel_init("embed", "heads", "kv"),
        bias_init=cfg.zeros_init("heads", "kv"))
    query = _projected(dense(name="query")(inputs_q), "query_proj", QUERY, cfg)
    key, value = self.keys_values(dense, inputs_kv, flat, self_attention)  # [b, kv, h, d]

    if cfg.position == "rotary":
      if positions is None:
        positions = jnp.arange(inputs_q.shape[1])[None]
      kv_positions = positions if (self_attention and kv_positions is None) else kv_positions
      if kv_positions is None:
        kv_positions = jnp.arange(inputs_kv.shape[1])[None]
      query = rotary.apply_rotary(query, positions, cfg.rotary_base)
      key = rotary.apply_rotary(key, kv_positions, cfg.rotary_base)

    key, value, mask, bias, impl = self.with_cache(query.shape[1], key, value, mask, bias,
                                                   self_attention)

    dropout_rng = None
    if not cfg.deterministic and cfg.attention_dropout_rate > 0.0:
      dropout_rng = self.make_rng("dropout")
    out = kernels.attention(
        query, key, value, bias, mask, dropout_rng, cfg.attention_dropout_rate,
        cfg.deterministic, cfg.attention_dtype, impl, return_weights)
    if return_weights:
      out, weights = out
      self.sow("intermediates", "attention_weights", weights)
    # out: [batch, q_len, heads, d_v] -> W^O -> [batch, q_len, d_model]; pinned flat
    # when flat: a [.., heads, d] array between the kernel and W^O would be laid out anew
    out_dense = functools.partial(dense_lib.FlatDense, in_shape=out.shape[2:]) if flat else (
        functools.partial(nn.DenseGeneral, axis=(-2, -1)))
    out = (sharding.constrain(out.reshape(out.shape[:2] + (-1,)), QUERY[:2] + ("heads",))
           if flat else sharding.constrain(out, QUERY))
    out = out_dense(features=inputs_q.shape[-1], use_bias=cfg.use_bias,
                    dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                    dot_general=dot_general, kernel_init=cfg.kernel_init("heads", "kv", "embed"),
                    bias_init=cfg.zeros_init("embed"), name="out")(out)
    return checkpoint_name(out, "out_proj")

  def keys_values(self, dense, inputs_kv: Array | None, flat: bool, self_attention: bool):
    """Keys and values [batch, kv_len, heads, d] projected from inputs_kv (kv_cache.py's
    CachedAttention: from the decode cache once the encoder side is in it)."""
    del self_attention  # the cached subclass's question
    if inputs_kv is None:
      raise ValueError("cross-attention needs inputs_kv (the encoder output) until its "
                       "keys/values are in the decode cache.")
    cfg = self.config
    return (_projected(dense(name="key")(inputs_kv), "key_proj", KEY_VALUE, cfg),
            _projected(dense(name="value")(inputs_kv), "value_proj", KEY_VALUE, cfg))

  def with_cache(self, q_len: int, key: Array, value: Array, mask, bias,
                 self_attention: bool):
    """(key, value, mask, bias, implementation) attention runs on: these projections;
    CachedAttention reads and writes the decode cache here."""
    del q_len, self_attention
    if self.config.decode:
      raise ValueError("config.decode needs a KV cache: build the attention as "
                       "layers/kv_cache.CachedAttention (the decoder's blocks do).")
    return key, value, mask, bias, self.config.attention_impl


def splash_layout(cfg, inputs_q: Array, inputs_kv: Array | None, bias, mask) -> bool:
  """Whether q/k/v and W^O's input are flat, [batch, len, heads * d] (dense.FlatDense):
  when d is not a multiple of TPU's 128 lanes and a Pallas TPU kernel (splash, or
  flash_dropout with attention dropout) will run this attention (kernels.runs_splash /
  runs_flash_dropout on the projections' shapes). A [.., heads, d] array with d = 64
  sits in half-empty 128-lane tiles, also where a remat policy saves it
  (docs/performance-notes.md, "Remat policies and splash attention on TPU").
  """
  if (cfg.decode or cfg.attention_impl == "reference" or cfg.d_head % kernels.LANES == 0):
    return False
  inputs_kv = inputs_q if inputs_kv is None else inputs_kv
  heads = (cfg.num_heads, cfg.d_head)
  query = jax.ShapeDtypeStruct(inputs_q.shape[:2] + heads, cfg.compute_dtype)
  value = jax.ShapeDtypeStruct(inputs_kv.shape[:2] + heads, cfg.compute_dtype)
  dropout = not cfg.deterministic and cfg.attention_dropout_rate > 0.0
  return (kernels.runs_splash(cfg.attention_impl, query, value, bias, mask, dropout)
          or kernels.runs_flash_dropout(cfg.attention_impl, query, value, bias, mask, dropout))


def _projected(x: Array, name: str, logical: tuple, cfg) -> Array:
  """A projection as [batch, len, heads, d], pinned under a mesh and tagged `name` for
  the remat policies (stacks.py); FlatDense's pinned and saved flat."""
  if x.ndim == 4:
    return checkpoint_name(sharding.constrain(x, logical), name)
  x = checkpoint_name(sharding.constrain(x, logical[:2] + ("heads",)), name)
  return x.reshape(x.shape[:2] + (cfg.num_heads, cfg.d_head))
