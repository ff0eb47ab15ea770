"""Rotary position embeddings (Su et al. 2021), applied to queries and keys."""
from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def apply_rotary(x: Array, positions: Array, base: float = 10000.0) -> Array:
  """Rotary position embedding (Su et al. 2021) on [batch, len, heads, d] (d even).

  Uses the rotate-half pairing (dimension j with j + d/2, as GPT-NeoX/LLaMA) so that
  <R(m) q, R(n) k> depends only on m - n. positions: [batch or 1, len].
  """
  d = x.shape[-1]
  if d % 2:
    raise ValueError(f"rotary encodings need an even head_dim, got {d}.")
  inv_freq = 1.0 / (base ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))   # [d/2]
  angles = positions.astype(jnp.float32)[..., None] * inv_freq              # [b, len, d/2]
  sin = jnp.sin(angles)[:, :, None, :]                                      # [b, len, 1, d/2]
  cos = jnp.cos(angles)[:, :, None, :]
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return rotated.astype(x.dtype)
