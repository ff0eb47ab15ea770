"""The cumulative sampler: one piece of code for every weighted draw on the host.

Drawing from a categorical distribution by `np.cumsum` over the weights and
`np.searchsorted` on uniform draws costs O(log V) a draw and is fully vectorized.
It serves three places:
  * NSP: the random document for `is_random_next` pairs (weights = doc lengths or 1),
  * MLM: the random replacement token (weights = corpus unigram counts),
  * word2vec: negatives (weights = unigram counts ** 0.75, Mikolov et al. 2013).

Also the loader's stateless randomness: counter-based uniforms (splitmix64 of a key and
a counter) and a keyed permutation of [0, n), both vectorized, both pure functions of
their inputs (no generator state to carry between workers or across a resume); and
the key streams built on them that say which examples a batch holds (TrainKeys: the
shuffled train stream; EvalKeys / eval_shard_indices: every eval example once), shared
by pretraining's loader and the fine-tuning tasks.

Host-side, numpy only: no JAX in the data path.
"""
from __future__ import annotations

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
      raise ValueError(
          f"CumulativeSampler needs a non-empty 1-D weight vector, got shape {w.shape}.")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
      raise ValueError("CumulativeSampler weights must be finite and non-negative.")
    zero = w == 0
    with np.errstate(divide="ignore"):  # 0 ** negative power: overwritten just below
      w = np.power(w, power)
    w[zero] = 0.0  # 0 ** power must stay 0, also for power <= 0.
    if exclude_ids is not None:
      w[np.asarray(exclude_ids, dtype=np.int64)] = 0.0
    total = w.sum()
    if total <= 0:
      raise ValueError("CumulativeSampler weights sum to zero: nothing can be drawn.")
    self.probs = w / total  # [V]
    self._cdf = np.cumsum(self.probs)  # [V], non-decreasing
    # Float round-off can leave the cdf a hair below 1 at the last drawable id; a
    # uniform draw landing in that gap would then return a zero-weight id after it
    # (an excluded special token). Pin everything from the last drawable id on to 1.
    self._cdf[np.flatnonzero(w)[-1]:] = 1.0

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
    ids = np.asarray(self._draw(rng, shape))  # 0-d array for shape=(), so it is assignable
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

  def from_uniform(self, u: np.ndarray) -> np.ndarray:
    """Maps uniforms in [0, 1) to ids (inverse cdf), for callers with their own random bits.

    The MLM masker draws its uniforms from a counter-based hash of (seed, epoch, example),
    so a sequence gets the same replacement tokens whichever worker masks it.
    """
    # side="right": an id of zero probability (a flat cdf step) is never returned.
    ids = np.searchsorted(self._cdf, u, side="right")
    return np.minimum(ids, self.size - 1).astype(np.int64)

  def _draw(self, rng: np.random.Generator, shape) -> np.ndarray:
    return self.from_uniform(rng.random(shape))


def unigram_counts(token_ids: np.ndarray, vocab_size: int) -> np.ndarray:
  """Counts of each id in a flat array of token ids: [vocab_size] int64."""
  return np.bincount(np.asarray(token_ids).ravel(), minlength=vocab_size).astype(np.int64)


# ------------------------------------------------- counter-based random bits and shuffles
# Stateless randomness for the loader: a value is a pure function of (seed, epoch, example,
# position), so any worker computes the same bits for the same example, in any order,
# after any resume, and whole batches are computed in a few vectorized numpy passes.
_GOLDEN = 0x9E3779B97F4A7C15


def _mix64(x: np.ndarray) -> np.ndarray:
  """splitmix64's finalizer: a bijective avalanche hash of uint64 arrays (wraps mod 2^64)."""
  x = x ^ (x >> np.uint64(30))
  x *= np.uint64(0xBF58476D1CE4E5B9)
  x ^= x >> np.uint64(27)
  x *= np.uint64(0x94D049BB133111EB)
  x ^= x >> np.uint64(31)
  return x


def example_keys(seed: int, epoch, index) -> np.ndarray:
  """[B] uint64 stream keys, one per (seed, epoch, example index)."""
  index = np.atleast_1d(np.asarray(index)).astype(np.uint64)
  epoch = np.broadcast_to(np.asarray(epoch), index.shape).astype(np.uint64)
  k = _mix64(np.full(index.shape, seed % 2**64, np.uint64) + np.uint64(_GOLDEN))
  k = _mix64(k ^ _mix64(epoch + np.uint64(_GOLDEN)))
  return _mix64(k ^ _mix64(index + np.uint64(2 * _GOLDEN % 2**64)))


def uniforms(keys: np.ndarray, stream: int, n: int) -> np.ndarray:
  """[B, n] float64 uniforms in [0, 1): splitmix64 stream `keys[b]`, counters of `stream`."""
  ctr = (np.uint64(stream) << np.uint64(32)) + np.arange(1, n + 1, dtype=np.uint64)  # [n]
  x = _mix64(keys[:, None] + ctr * np.uint64(_GOLDEN))  # [B, n]
  return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53


def permute(i: np.ndarray, n: int, key) -> np.ndarray:
  """A keyed pseudo-random permutation of [0, n), applied to the indices `i`, vectorized.

  A 4-round unbalanced Feistel network (multiply-shift round function) on the 2^b values
  covering n, cycle-walking values that land at or past n back in (fewer than 2 trips
  expected, as 2^b < 2n). Memory O(len(i)) whatever n is, so an epoch's shuffled order
  is never materialized.

  Args:
    i: int indices in [0, n).
    n: domain size.
    key: uint64 key, scalar or one per index (e.g. the epoch's key of each position).
  """
  i = np.asarray(i)
  if n <= 1:
    return np.zeros(i.shape, np.int64)
  keys = np.broadcast_to(np.asarray(key, np.uint64), i.shape)
  out = np.empty(i.shape, np.int64)
  for k in np.unique(keys):  # a batch spans one epoch, rarely two: scalar keys are cheap
    at = keys == k
    out[at] = _feistel(i[at].astype(np.uint64), n, k)
  return out


_M64 = (1 << 64) - 1


def _mix64_int(x: int) -> int:
  """_mix64 on one Python int (the same bits, without numpy's per-call overhead)."""
  x ^= x >> 30
  x = (x * 0xBF58476D1CE4E5B9) & _M64
  x ^= x >> 27
  x = (x * 0x94D049BB133111EB) & _M64
  return x ^ (x >> 31)


def _feistel(x: np.ndarray, n: int, key: np.uint64) -> np.ndarray:
  bits = max(2, int(n - 1).bit_length())
  # Round r splits the value into a high part of widths[r] bits and a low part of the
  # rest, and returns (low, high ^ F(low)): the widths swap every round, each round is a
  # bijection. F is multiply-shift hashing, the top bits of (low ^ key) * odd.
  widths = [bits - bits // 2, bits // 2] * 2
  round_keys = [_mix64_int((int(key) + (r + 1) * _GOLDEN) & _M64) for r in range(4)]
  todo = np.arange(len(x))
  # Vectorized trips while many values are out of range; the few left after that
  # (the cycle-walk's geometric tail) are cheaper one by one in Python ints.
  while len(todo) > 16:
    y = x[todo]
    for rk, wh in zip(round_keys, widths):
      wl = bits - wh
      low = y & np.uint64((1 << wl) - 1)
      f = ((low ^ np.uint64(rk)) * np.uint64(_GOLDEN)) >> np.uint64(64 - wh)
      y = (low << np.uint64(wh)) | ((y >> np.uint64(wl)) ^ f)
    x[todo] = y
    todo = todo[y >= np.uint64(n)]
  for t in todo.tolist():
    y = int(x[t])
    while True:
      for rk, wh in zip(round_keys, widths):
        wl = bits - wh
        low = y & ((1 << wl) - 1)
        f = (((low ^ rk) * _GOLDEN) & _M64) >> (64 - wh)
        y = (low << wh) | ((y >> wl) ^ f)
      if y < n:
        break
    x[t] = y
  return x.astype(np.int64)


# ------------------------------------------------------------- key streams
class TrainKeys:
  """Batch j of process p -> [B, 2] (epoch, instance index), the global shuffle vectorized.

  Global stream position k holds instance permute(k mod n) of epoch k // n; process p of
  S takes positions p, p + S, ... Grain's per-example shuffle/slice/batch chain costs
  ~40 us an example in Python, more than reading and masking it: this is one numpy pass.
  `start`: the stream's first global position (a later stage of a batch warmup goes on
  where the earlier ones, at other batch sizes, stopped: train/phases.stream_start).
  """

  def __init__(self, n: int, batch_size: int, shard_index: int, shard_count: int, seed: int,
               start: int = 0):
    self.n, self.batch_size, self.seed = n, batch_size, seed
    self.shard_index, self.shard_count, self.start = shard_index, shard_count, start

  def __call__(self, j: int) -> np.ndarray:
    pos = (j * self.batch_size + np.arange(self.batch_size)) * self.shard_count
    pos += self.shard_index + self.start  # [B] global stream positions
    epoch = pos // self.n
    # A key per epoch (index 2^64 - 1, which no example has): a fresh order every epoch.
    key = example_keys(self.seed, epoch, np.full(len(pos), 2**64 - 1, np.uint64))
    return np.stack([epoch, permute(pos % self.n, self.n, key)], axis=1)


class EvalKeys:
  def __init__(self, indices: np.ndarray, batch_size: int):
    self.indices, self.batch_size = indices, batch_size

  def __call__(self, j: int) -> np.ndarray:
    index = self.indices[j * self.batch_size:(j + 1) * self.batch_size]
    return np.stack([np.zeros_like(index), index], axis=1)


def _eval_batches(n: int, batch_size: int, shard_count: int) -> int:
  per_process = -(-n // shard_count)
  return -(-per_process // batch_size)


def eval_shard_indices(n: int, batch_size: int, shard_index: int, shard_count: int):
  """[batches * batch_size] example indices of this process (p, p + S, ...), -1 padded so
  that every process runs the same number of eval batches."""
  indices = np.full(_eval_batches(n, batch_size, shard_count) * batch_size, -1, np.int64)
  mine = np.arange(shard_index, n, shard_count)
  indices[:len(mine)] = mine
  return indices
