"""Length buckets: rows padded to a few fixed lengths instead of all to the maximum.

Where several examples cannot share a row (SQuAD's windows are long), a batch is padded
only to the smallest of a fixed set of lengths that holds its longest row: static
shapes, one compile per bucket, and far less padding once rows of similar length are
batched together. The lengths are the multiples of a step up to the maximum
(`bucket_lengths(384, 64)` = 64, 128, ..., 384: six shapes at most).

* Training (`BucketTrainKeys`): the train stream is TrainKeys' global shuffle, cut into
  windows of `window_batches` global batches; within a window the rows are sorted by
  length, cut into batches, and the batches put in a keyed random order. So every
  example is seen once an epoch as before, batches hold similar lengths, and batch j
  is a pure function of (seed, j): the grain iterator's state (its position) resumes
  exactly.
* Evaluation and prediction (`eval_plan`): every row once, sorted by length and cut
  into batches, each padded to its bucket; padding rows (index -1) only in the first.
  Rows with several sides (translation's source and target) get a bucket a side.

Several processes agree on the batches' shapes without talking: each one computes the
same global plan and takes its own rows of every global batch (rows p, p + S, ...), as
TrainKeys and eval_shard_indices do. Host-side, numpy only.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from bert_jax.data import sampling


def bucket_lengths(max_len: int, step: int) -> np.ndarray:
  """[buckets] int64: step, 2 step, ... below max_len, then max_len itself.

  step <= 0 or >= max_len gives [max_len]: every row padded to the maximum (the padded
  path, google-research/bert's exact batches).
  """
  if step <= 0 or step >= max_len:
    return np.array([max_len], np.int64)
  return np.append(np.arange(step, max_len, step, dtype=np.int64), max_len)


def bucket_of(lengths, buckets: np.ndarray) -> np.ndarray:
  """The smallest bucket length holding each length: [n] int64 (a length above the last
  bucket is an error: rows are already cut to the maximum)."""
  lengths = np.asarray(lengths, np.int64)
  where = np.searchsorted(buckets, lengths, side="left")
  if lengths.size and where.max() >= len(buckets):
    raise ValueError(f"a row of {int(lengths.max())} tokens exceeds the longest bucket "
                     f"{int(buckets[-1])}")
  return buckets[where]


class BucketTrainKeys:
  """Batch j of process p -> ([B, 2] (epoch, example index), bucket length).

  Window w holds global stream positions [w W, (w + 1) W), W = window_batches x global
  batch, of TrainKeys' stream (position k: example permute(k mod n) of epoch k // n).
  The window's rows are sorted by length (ties keep their shuffled order), cut into
  window_batches global batches, and those batches visited in a keyed random order, so
  short and long batches interleave instead of the run ending each window on its longest.
  """

  def __init__(self, lengths, buckets: np.ndarray, batch_size: int, shard_index: int,
               shard_count: int, seed: int, window_batches: int):
    if window_batches < 1:
      raise ValueError(f"window_batches={window_batches}; expected >= 1.")
    self.lengths = np.asarray(lengths, np.int64)   # [n] real tokens of each example
    self.buckets = np.asarray(buckets, np.int64)
    bucket_of(self.lengths, self.buckets)          # every row fits: checked once
    self.batch_size, self.seed = batch_size, seed
    self.shard_index, self.shard_count = shard_index, shard_count
    self.window_batches = window_batches
    global_batch = batch_size * shard_count
    self._stream = sampling.TrainKeys(len(self.lengths), window_batches * global_batch,
                                      0, 1, seed)
    self._cached = (None, None)                    # (window, [window_batches, GB, 2])

  def _window(self, w: int) -> np.ndarray:
    """[window_batches, global batch, 2] keys of window w, batches in visiting order."""
    if self._cached[0] != w:
      keys = self._stream(w)                                    # [W, 2], shuffled
      order = np.argsort(self.lengths[keys[:, 1]], kind="stable")
      batches = keys[order].reshape(self.window_batches, -1, 2)  # sorted, cut in batches
      # The window's own key (example index 2^64 - 2, which no example has).
      key = sampling.example_keys(self.seed, w, np.uint64(2**64 - 2))[0]
      visit = sampling.permute(np.arange(self.window_batches), self.window_batches, key)
      self._cached = (w, batches[visit])
    return self._cached[1]

  def __call__(self, j: int) -> tuple[np.ndarray, int]:
    w, b = divmod(int(j), self.window_batches)
    batch = self._window(w)[b]                                   # [GB, 2] global batch
    length = int(bucket_of(self.lengths[batch[:, 1]].max(), self.buckets))
    return batch[self.shard_index::self.shard_count], length     # [B, 2], this process's


@dataclasses.dataclass(frozen=True)
class EvalPlan:
  """Every row once: batch i holds indices[i] ([B] of this process, -1 = padding row),
  padded to lengths[i] tokens (one length; or a tuple, one a side, where rows have
  several sides, e.g. a translation pair's source and target)."""
  indices: np.ndarray    # [batches, B] int64
  lengths: np.ndarray    # [batches] int64, or [batches, sides]

  def __len__(self) -> int:
    return len(self.lengths)

  def __call__(self, i: int):
    index = self.indices[i]
    keys = np.stack([np.zeros_like(index), index], axis=1)
    if self.lengths.ndim == 1:
      return keys, int(self.lengths[i])
    return keys, tuple(int(n) for n in self.lengths[i])


def eval_plan(lengths, buckets, batch_size: int, shard_index: int = 0,
              shard_count: int = 1) -> EvalPlan:
  """Every row once: rows sorted by length (ties in index order), cut into global batches
  of batch_size x shard_count rows, each padded to the bucket of its longest row; this
  process's rows of each. Only the first batch, the shortest, has padding rows (a batch
  per bucket would leave a part-empty one in every bucket; padding rows in the last
  batch would cost the longest bucket's length each).

  Rows of several sides: lengths [n, sides] and `buckets` one array a side; each side of
  a batch is padded to its own bucket. Rows are sorted by the first side's bucket, then
  by the next sides' lengths, then by the first side's length: the same first-side
  buckets batch by batch as sorting by its length alone (the sequence of first-side
  buckets along the order is the same), with less padding on the other sides.
  """
  lengths = np.asarray(lengths, np.int64)
  cols = lengths.reshape(len(lengths), -1)                        # [n, sides]
  sides = [np.asarray(buckets, np.int64)] if lengths.ndim == 1 else list(buckets)
  if len(sides) != cols.shape[1]:
    raise ValueError(f"{cols.shape[1]} length columns but {len(sides)} bucket sets.")
  first = bucket_of(cols[:, 0], sides[0])
  # np.lexsort: the last key is the primary one; stable, so ties keep index order.
  order = np.lexsort((cols[:, 0],) + tuple(cols[:, ::-1][:, :-1].T) + (first,))
  global_batch = batch_size * shard_count
  padded = np.full(-(-len(order) // global_batch) * global_batch, -1, np.int64)
  padded[len(padded) - len(order):] = order
  batches = padded.reshape(-1, global_batch)                      # [batches, GB]
  real = (batches >= 0)[..., None]
  longest = np.where(real, cols[np.maximum(batches, 0)], 0).max(axis=1,
                                                                 initial=0)  # [batches, sides]
  padded_to = np.stack([bucket_of(longest[:, s], b) for s, b in enumerate(sides)], axis=1)
  return EvalPlan(batches[:, shard_index::shard_count],
                  padded_to[:, 0] if lengths.ndim == 1 else padded_to)


def fill_rate(lengths: Sequence[int], batches: Sequence[tuple[np.ndarray, int]]) -> float:
  """Real tokens / computed positions of (keys or indices, length) batches (padding rows
  count as computed)."""
  lengths = np.asarray(lengths, np.int64)
  real = computed = 0
  for rows, length in batches:
    index = rows[:, 1] if rows.ndim == 2 else rows
    real += int(lengths[index[index >= 0]].sum())
    computed += len(index) * int(length)
  return real / max(computed, 1)
