"""Dropout (Srivastava et al. 2014) on the 'dropout' rng stream: each element is kept
with probability 1 - rate and the kept ones scaled by 1 / (1 - rate), so E[dropout(x)]
is x. The mask is elementwise on x's shape, so it shards like the activation it drops
(jax's partitionable threefry draws each shard's bits where the shard lives)."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array


def dropout(rng: jax.Array, x: Array, rate: float) -> Array:
  """x with elements zeroed with probability `rate`, the rest scaled to keep E[x]."""
  if rate == 0.0:
    return x
  if not 0.0 < rate < 1.0:
    raise ValueError(f"dropout rate {rate} is not in [0, 1).")
  keep = jax.random.bernoulli(rng, 1.0 - rate, x.shape)
  return jnp.where(keep, x / jnp.asarray(1.0 - rate, x.dtype), jnp.zeros((), x.dtype))


class Dropout(nn.Module):
  """`Dropout(rate, deterministic=...)` as flax's, through `dropout` above."""
  rate: float
  deterministic: bool | None = None

  @nn.compact
  def __call__(self, x: Array, deterministic: bool | None = None) -> Array:
    if nn.merge_param("deterministic", self.deterministic, deterministic) or self.rate == 0.0:
      return x
    return dropout(self.make_rng("dropout"), x, self.rate)
