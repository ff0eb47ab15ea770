"""Scaled dot-product attention written out: the semantics of every path in kernels/.

softmax(Q K^T / sqrt(d_k) + bias), masked, then (with attention dropout) dropped, times V
(Vaswani et al. 2017, eq. 1). The fused kernels (splash, cuDNN) and the XLA path are
tested against this function; it is also the path that returns the attention matrix
(the pictures) and the one that applies attention dropout.

Conventions: q/k/v [batch, len, heads, head_dim]; masks True where attention is allowed
(bools broadcastable to [batch, heads, q_len, kv_len], or a masks.SegmentMask); biases
are added to the logits.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from bert_jax.kernels.masks import MASK_VALUE, as_dense
from bert_jax.runtime import sharding

Array = jax.Array

# Logical names of the scores, pinned under a mesh (sharding.constrain): heads over
# `tensor`, rows over the data axes, so the partitioner never keeps them whole per chip.
SCORES = ("batch", "heads", "length", "kv_length")           # [batch, heads, q, kv]


def attention(query: Array, key: Array, value: Array, bias: Array | None = None,
              mask=None, dropout_rng=None, dropout_rate: float = 0.0,
              deterministic: bool = True, dtype=jnp.float32, keep: Array | None = None):
  """Returns (output [batch, q_len, heads, d_v], weights [batch, heads, q_len, kv_len]
  float32: the softmax before dropout).

  query [batch, q_len, heads, d_k], key [batch, kv_len, heads, d_k], value [batch,
  kv_len, heads, d_v]; bias additive and mask bool (or a SegmentMask), both broadcastable
  to [batch, heads, q_len, kv_len]; a fully masked query gets uniform weights. keep: the
  dropout's keep mask (bool [batch, heads, q_len, kv_len]) instead of a draw from
  dropout_rng: the fused kernel's (dropout_hash.keep_mask), which its tests compare with.
  """
  mask = as_dense(mask, query.shape[1], key.shape[1])
  logits = jnp.einsum("bqhd,bkhd->bhqk", query, key, preferred_element_type=jnp.float32)
  logits = sharding.constrain(logits / jnp.sqrt(query.shape[-1]).astype(jnp.float32), SCORES)
  if bias is not None:
    logits = logits + bias.astype(jnp.float32)
  if mask is not None:
    logits = jnp.where(mask, logits, MASK_VALUE)
  weights = jax.nn.softmax(logits, axis=-1)  # float32 softmax, whatever the compute dtype
  probs = weights
  if not deterministic and dropout_rate > 0.0:
    if keep is None:
      keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, weights.shape)
    probs = jnp.where(keep, weights / (1.0 - dropout_rate), 0.0)
  out = jnp.einsum("bhqk,bkhd->bqhd", probs.astype(dtype), value.astype(dtype))
  return out, weights
