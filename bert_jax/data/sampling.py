"""The cumulative sampler: one piece of code for every weighted draw on the host.

Drawing from a categorical distribution by `np.cumsum` over the weights and
`np.searchsorted` on uniform draws costs O(log V) a draw and is fully vectorized.
It serves three places:
  * NSP: the random document for `is_random_next` pairs (weights = doc lengths or 1),
  * MLM: the random replacement token (weights = corpus unigram counts),
  * word2vec: negatives (weights = unigram counts ** 0.75, Mikolov et al. 2013).

Host-side, numpy only: no JAX in the data path.
"""
from __future__ import annotations

from typing import Optional

import numpy as np


class CumulativeSampler:
  """Draws ids in [0, len(weights)) with probability proportional to weights ** power."""

  def __init__(self, weights, power: float = 1.0, exclude_ids=None):
    """Args:
      weights: [V] non-negative counts or weights.
      power: weights are raised to this power (0.75 for word2vec negatives).
      exclude_ids: ids never to draw (e.g. special tokens); their weight becomes 0.
    """
    w = np.asarray(weights, dtype=np.float64).copy()
    if w.ndim != 1 or w.size == 0:
      raise ValueError(f"CumulativeSampler needs a non-empty 1-D weight vector, got shape {w.shape}.")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
      raise ValueError("CumulativeSampler weights must be finite and non-negative.")
    zero = w == 0
    w = np.power(w, power)
    w[zero] = 0.0  # 0 ** power must stay 0, also for power <= 0.
    if exclude_ids is not None:
      w[np.asarray(exclude_ids, dtype=np.int64)] = 0.0
    total = w.sum()
    if total <= 0:
      raise ValueError("CumulativeSampler weights sum to zero: nothing can be drawn.")
    self.probs = w / total  # [V]
    self._cdf = np.cumsum(self.probs)  # [V], non-decreasing
    self._cdf[-1] = 1.0  # float round-off must not leave the last bin short

  @property
  def size(self) -> int:
    return self._cdf.shape[0]

  def sample(self, rng: np.random.Generator, shape=(), exclude=None,
             max_redraws: int = 64) -> np.ndarray:
    """Draws ids of the given shape.

    Args:
      rng: numpy Generator (callers own the seeding, so streams are reproducible).
      shape: output shape.
      exclude: optional per-draw id to avoid, broadcastable to `shape` (e.g. the
        true context word of each row, [batch, 1], for negatives [batch, k]).
        Draws equal to it are redrawn, vectorized, until none is left.
      max_redraws: bound on redraw rounds, so a distribution whose mass sits almost
        entirely on the excluded id raises instead of looping forever.

    Returns:
      int64 ids of `shape`.
    """
    ids = self._draw(rng, shape)
    if exclude is None:
      return ids
    exclude = np.broadcast_to(np.asarray(exclude), ids.shape)
    bad = ids == exclude
    for _ in range(max_redraws):
      n_bad = int(bad.sum())
      if n_bad == 0:
        return ids
      ids[bad] = self._draw(rng, (n_bad,))
      bad = ids == exclude
    if bad.any():
      raise RuntimeError(
          f"CumulativeSampler: {int(bad.sum())} draws still hit their excluded id after "
          f"{max_redraws} redraws; that id holds almost all the probability mass.")
    return ids

  def _draw(self, rng: np.random.Generator, shape) -> np.ndarray:
    u = rng.random(shape)
    # side="right": an id of zero probability (a flat cdf step) is never returned.
    ids = np.searchsorted(self._cdf, u, side="right")
    return np.minimum(ids, self.size - 1).astype(np.int64)


def unigram_counts(token_ids: np.ndarray, vocab_size: int) -> np.ndarray:
  """Counts of each id in a flat array of token ids: [vocab_size] int64."""
  return np.bincount(np.asarray(token_ids).ravel(), minlength=vocab_size).astype(np.int64)
