"""Where the batch lives in a decoding cache, and how beams are made from it and re-gathered.

A cache is any pytree. Each leaf's batch axis follows from its path, with no registration:
- a leaf under a dict key named "layers" (a scanned stack, `nn.scan` puts the layer axis
  first: [layers, batch, ...]) has its batch on axis 1;
- any other leaf (unrolled stacks `layers_0..`, an RNN's hidden state [batch, units], the
  step function's own per-row entries) has it on axis 0;
- a leaf with no such axis (ndim <= that axis: the shared cache index, a scanned stack's
  [layers] index) is common to all rows and is left alone. Everything in the cache advances
  in lockstep across rows, so a shared index is exact.
Leaves under a dict key that starts with "cross_" (the encoder side: cross-attention
keys/values, the source mask) are constant within a source row: beam search repeats them
once and never re-gathers them (beams never move across rows), which saves copying them
every step.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

Array = jax.Array


def _names(path) -> list[str]:
  return [str(getattr(k, "key", getattr(k, "name", ""))) for k in path]


def batch_axis(path, leaf) -> int | None:
  """The batch axis of `leaf` at tree `path` (see the module docstring), or None."""
  axis = 1 if "layers" in _names(path) else 0
  return axis if jnp.ndim(leaf) > axis else None


def is_cross(path) -> bool:
  return any(n.startswith("cross_") for n in _names(path))


def map_batched(fn: Callable[[Array, int], Array], tree: Any, *, skip_cross: bool = False):
  """Applies fn(leaf, batch_axis) to every batched leaf; other leaves pass through."""
  def visit(path, leaf):
    axis = batch_axis(path, leaf)
    if axis is None or (skip_cross and is_cross(path)):
      return leaf
    return fn(leaf, axis)
  return jax.tree_util.tree_map_with_path(visit, tree)


def expand_beams(tree: Any, beam_size: int) -> Any:
  """Repeats every row beam_size times: batch B -> B * beam_size, beams of a row adjacent."""
  return map_batched(lambda x, a: jnp.repeat(x, beam_size, axis=a), tree)


def gather_beams(tree: Any, parents: Array, beam_size: int) -> Any:
  """Re-orders a [B * beam_size]-batched tree: new beam j of row b <- old beam parents[b, j].

  parents [B, beam_size] int. "cross_*" leaves are identical across a row's beams: skipped.
  """
  batch = parents.shape[0]
  flat = (jnp.arange(batch)[:, None] * beam_size + parents).reshape(-1)  # [B * beam]
  # mode="clip": the indices are in range by construction; the default "fill" would add a
  # select over every gathered cache element (~6% of a beam-4 step in bench/inference/decode.py).
  return map_batched(lambda x, a: jnp.take(x, flat, axis=a, mode="clip"), tree,
                     skip_cross=True)

