"""Additive attention (Bahdanau et al. 2015), the attention of the GRU translation model."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.kernels.masks import MASK_VALUE

Array = jax.Array


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
