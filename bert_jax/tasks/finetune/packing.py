"""Packed fine-tuning rows (data.packing): several examples a row, classification and NER.

Fine-tuning examples are short (polarity: 28 tokens on average, at max_seq_length 64 or
128), so one example a row padded to max_seq_length computes mostly padding. Here the
examples of a split are packed into rows of max_seq_length tokens by first-fit
decreasing (data/packing.py), at most K = data.max_examples_per_row a row, and each
example keeps its own [CLS] .. [SEP], token types and positions from 0, and attends
only to itself (packed_segment_ids: BertModel's block-diagonal mask), so its outputs
are those of the padded path (tests/tasks/finetune/test_packing.py).

Batch dict (R rows, L = data.max_seq_length, K = data.max_examples_per_row):
  input_ids, input_mask, segment_ids  int32   [R, L]   examples back to back (in rows in
                                                       blocks: within each block); 0 after
  positions                           int32   [R, L]   0.. in every example
  packed_segment_ids                  int32   [R, L]   slot k of the row is k + 1; 0 = pad
  NER labels, label_weights                   [R, L]   the token fields, laid out alike
  example_starts                      int32   [R*K]    first token ([CLS]) of each slot
  classification labels                       [R*K]    the per-example fields, by slot
  example_weight                      float32 [R*K]    1 on filled slots, 0 on empty ones
  feature_index                       int32   [R*K]    the slot's feature, -1 = empty slot
Per-example arrays are flat, R*K long, so the losses, metrics and `ordered` of the
padded path apply to them unchanged (logits come back [R*K, classes]).

Rows in blocks (data.packing_block, default half of a row of >= 128 tokens): sentences
of at most a block are packed into blocks (PackPlan), so no document of those rows
crosses a block boundary. The attention reads whole rows either way (segment ids keep
the documents apart); an attention that ran such rows block by block was XLA:CPU tuning
and is gone (git history: layers/dot_product.py).

Training: the packing depends only on the sorted lengths, so every epoch has the same
rows M; an epoch is ceil(M / global rows) batches (PackPlan.epoch_batches: whole rows
and rows in blocks batched apart, the batch order shuffled, the last one padded with
empty rows), a pure function of (seed, epoch), and the grain iterator's state is its
batch number (exact resume, as the padded path). Which examples share a row also
changes every epoch: ties in length are broken by the epoch's shuffle of the examples.
"""
from __future__ import annotations

import sys

import grain
import numpy as np

from bert_jax.data import sampling
from bert_jax.data.packing import first_fit_decreasing

# example_keys indices of the shuffles (TrainKeys uses 2^64 - 1): which examples share a
# row, the order of the whole rows, of the rows in blocks, and of the epoch's batches.
_MEMBER_STREAM, _WHOLE_STREAM, _BLOCK_STREAM, _BATCH_STREAM = (2**64 - k for k in (2, 3, 4, 5))


class PackPlan:
  """How the features of a split fill rows: the packing's structure, and each epoch's
  members.

  block (0: off; a divisor of row_length): rows laid out for attention in blocks.
  Examples longer than a block open whole rows (FFD), shorter ones first fill those
  rows' free tokens, and the rest are packed by FFD into bins of `block` tokens,
  row_length / block bins a row, each bin at most max_per_row / (row_length / block)
  examples. No document then crosses a block boundary of those rows. Rows
  [0, num_whole) are the whole rows, the rest the rows in blocks.
  """

  def __init__(self, features: dict, row_length: int, max_per_row: int, block: int = 0):
    self.lengths = features["input_mask"].sum(axis=1).astype(np.int64)   # [N]
    self.row_length, self.max_per_row = row_length, max_per_row
    self.block = block  # validated with the config (base.packing_block)
    descending = np.sort(self.lengths)[::-1]
    # [M, K] ranks (0 = the longest example) of each row's examples, -1 = empty slot,
    # and the first token of each slot.
    self.rank_rows, self.rank_starts, self.num_whole = _layout(
        descending, row_length, max_per_row, self.block)
    self.num_rows = len(self.rank_rows)
    self.fill = float(self.lengths.sum()) / max(1, self.num_rows * row_length)
    self._epochs: dict = {}  # (seed, epoch) -> members: the last two epochs seen
    self._batches: dict = {}  # (seed, epoch, rows) -> [batches, rows] of that epoch

  def members(self, order: np.ndarray) -> np.ndarray:
    """[M, K] feature indices of each row (-1 = empty) when the packer sees the features
    in `order`: equally long features are placed in that order."""
    ranked = order[np.argsort(-self.lengths[order], kind="stable")]
    return np.where(self.rank_rows >= 0, ranked[np.maximum(self.rank_rows, 0)], -1)

  def epoch_members(self, seed: int, epoch: int) -> np.ndarray:
    """[M, K] of a training epoch: the features in that epoch's shuffled order."""
    if (seed, epoch) not in self._epochs:
      n = len(self.lengths)
      key = sampling.example_keys(seed, epoch, np.uint64(_MEMBER_STREAM))[0]
      order = sampling.permute(np.arange(n), n, key)
      # A batch spans at most two epochs: keep the previous one only.
      self._epochs = {k: v for k, v in self._epochs.items() if k == (seed, epoch - 1)}
      self._epochs[(seed, epoch)] = self.members(order)
    return self._epochs[(seed, epoch)]

  def batches_per_epoch(self, rows: int) -> int:
    return -(-self.num_rows // rows)

  def epoch_batches(self, seed: int, epoch: int, rows: int) -> np.ndarray:
    """[batches, rows] row indices (-1 = empty) of a training epoch's global batches.

    Every row once; the whole rows and the rows in blocks shuffled apart and batched
    apart (only the batch where one kind ends mixes them: it attends over whole rows),
    the batches in a shuffled order, the last one padded with empty rows."""
    if (seed, epoch, rows) not in self._batches:
      def shuffled(n, stream):  # a permutation of 0..n-1
        key = sampling.example_keys(seed, epoch, np.uint64(stream))[0]
        return sampling.permute(np.arange(n), n, key) if n else np.arange(0)
      order = np.concatenate([shuffled(self.num_whole, _WHOLE_STREAM), self.num_whole
                              + shuffled(self.num_rows - self.num_whole, _BLOCK_STREAM)])
      n = self.batches_per_epoch(rows)
      table = np.full(n * rows, -1, np.int64)
      table[:len(order)] = order
      table = table.reshape(n, rows)[shuffled(n, _BATCH_STREAM)]
      self._batches = {k: v for k, v in self._batches.items() if k[1] == epoch - 1}
      self._batches[(seed, epoch, rows)] = table
    return self._batches[(seed, epoch, rows)]

  def summary(self, rows_per_step: int) -> str:
    n = len(self.lengths)
    per_row = n / max(1, self.num_rows)
    blocks = ""
    if self.block:
      blocks = (f"; {self.num_rows - self.num_whole} of them in blocks of {self.block} "
                f"(attention within a block), {self.num_whole} whole")
    # What a step of this data holds: its rows over the epoch's steps (the last step is
    # padded with empty rows), not rows_per_step full rows, which fewer rows than a
    # step's cannot fill.
    steps = self.batches_per_epoch(rows_per_step)
    if self.num_rows < rows_per_step:
      step = (f"a step of {rows_per_step} rows holds all {n} examples in its first "
              f"{self.num_rows} rows, the other {rows_per_step - self.num_rows} empty")
    else:
      step = (f"~{n / steps:.0f} examples a step of {rows_per_step} rows "
              f"({steps} step{'s' if steps > 1 else ''} an epoch)")
    return (f"packing: {n} examples in {self.num_rows} rows of {self.row_length} "
            f"(first-fit decreasing, <= {self.max_per_row} a row{blocks}): "
            f"{100 * self.fill:.1f}% real tokens, {per_row:.2f} examples a row, {step}")


def _layout(descending: np.ndarray, row_length: int, max_per_row: int, block: int):
  """(ranks [M, K], starts [M, K], whole rows) of lengths sorted longest first."""
  n = len(descending)
  per_row = row_length // block if block else 1
  if block and max_per_row // per_row < 1:
    raise ValueError(f"data.max_examples_per_row={max_per_row} leaves no example a block "
                     f"of {block} tokens ({per_row} blocks a row): raise it or set "
                     "data.packing_block=0.")
  # Every example goes into a unit: a whole row (units 0..W-1), or a bin of `block`
  # tokens (W, W+1, ...; per_row consecutive bins make a row).
  unit = np.full(n, -1, np.int64)
  num_long = int(np.sum(descending > block)) if block else n
  unit[:num_long] = first_fit_decreasing(descending[:num_long], row_length, max_per_row)
  whole = int(unit[:num_long].max()) + 1 if num_long else 0
  rest = np.arange(num_long, n)
  if block and whole and rest.size:  # shorter examples into the whole rows' free tokens
    free = row_length - np.bincount(unit[:num_long], descending[:num_long], whole)
    room = max_per_row - np.bincount(unit[:num_long], minlength=whole)
    unit[rest] = first_fit_decreasing(descending[rest], row_length, max_per_row,
                                      free.astype(np.int64), room)
    rest = rest[unit[rest] < 0]
  bins = 0
  if rest.size:
    unit[rest] = whole + first_fit_decreasing(descending[rest], block, max_per_row // per_row)
    bins = int(unit[rest].max()) + 1 - whole
  unit_row = np.concatenate([np.arange(whole), whole + np.arange(bins) // per_row])
  unit_offset = np.concatenate([np.zeros(whole, np.int64), np.arange(bins) % per_row * block])
  # Within a unit its examples lie back to back in rank order (longest first).
  by_unit = np.argsort(unit, kind="stable")
  lens, units = descending[by_unit], unit[by_unit]
  ends = np.cumsum(lens)
  first = np.searchsorted(units, units)                       # each unit's first entry
  starts = np.empty(n, np.int64)
  starts[by_unit] = unit_offset[units] + ends - lens - (ends[first] - lens[first])
  rows = unit_row[unit]
  # Slots of a row in token order.
  order = np.lexsort((starts, rows))
  slot = np.arange(n) - np.searchsorted(rows[order], rows[order])
  num_rows = int(rows.max()) + 1 if n else 0
  rank_rows = np.full((num_rows, max_per_row), -1, np.int64)
  rank_starts = np.zeros((num_rows, max_per_row), np.int64)
  rank_rows[rows[order], slot] = order
  rank_starts[rows[order], slot] = starts[order]
  return rank_rows, rank_starts, whole


class PackedRows:
  """Row keys [R, 2] (epoch, row; -1 = empty row) -> a packed batch dict.

  seed: training rows, the examples of each epoch shuffled by it; None: evaluation,
  the features in their own order (every row the same at every evaluation)."""

  def __init__(self, features: dict, fields: tuple, plan: PackPlan, seed=None):
    self.features = {k: features[k] for k in fields if k in features}
    self.plan, self.seed = plan, seed
    self._eval_members = (plan.members(np.arange(len(plan.lengths))) if seed is None
                          else None)

  def _members(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out = np.full((len(keys), self.plan.max_per_row), -1, np.int64)     # [R, K]
    starts = np.zeros_like(out)
    for epoch in np.unique(keys[:, 0]):
      at = (keys[:, 0] == epoch) & (keys[:, 1] >= 0)
      table = (self._eval_members if self.seed is None
               else self.plan.epoch_members(self.seed, int(epoch)))
      out[at] = table[keys[at, 1]]
      starts[at] = self.plan.rank_starts[keys[at, 1]]
    return out, starts

  def __call__(self, keys: np.ndarray) -> dict:
    members, starts = self._members(keys)
    return rows_of(self.features, members, self.plan.lengths, self.plan.row_length, starts)


class EpochBatchKeys:
  """Batch j of process p -> [R, 2] (epoch, row) keys: this shard's rows (p, p + S, ...)
  of global batch j of the plan's epoch batches (PackPlan.epoch_batches), R rows each."""

  def __init__(self, plan: PackPlan, rows: int, shard_index: int, shard_count: int,
               seed: int):
    self.plan, self.rows, self.seed = plan, rows, seed
    self.shard_index, self.shard_count = shard_index, shard_count

  def __call__(self, j: int) -> np.ndarray:
    global_rows = self.rows * self.shard_count
    epoch, b = divmod(j, self.plan.batches_per_epoch(global_rows))
    table = self.plan.epoch_batches(self.seed, epoch, global_rows)
    row = table[b, self.shard_index::self.shard_count]
    return np.stack([np.full(len(row), epoch, np.int64), row], axis=1)


def rows_of(features: dict, members: np.ndarray, lengths: np.ndarray, row_length: int,
            starts: np.ndarray | None = None) -> dict:
  """The packed batch of `members` [R, K] (feature indices, -1 = empty slot), each at its
  first token `starts` [R, K] (None: back to back from token 0)."""
  real = members >= 0                                            # [R, K]
  safe = np.maximum(members, 0)
  lens = np.where(real, lengths[safe], 0)                        # [R, K]
  if starts is None:
    starts = np.cumsum(lens, axis=1) - lens
  starts = np.where(real, starts, 0)
  t = np.arange(row_length)
  inside = ((t >= starts[:, :, None]) & (t < (starts + lens)[:, :, None])
            & real[:, :, None])                                  # [R, K, L]
  valid = inside.any(axis=1)                                     # [R, L] inside an example
  slot = np.argmax(inside, axis=1)                               # [R, L] its slot
  who = np.take_along_axis(safe, slot, axis=1)                   # [R, L] feature of token
  pos = np.where(valid, t[None, :] - np.take_along_axis(starts, slot, axis=1), 0)
  batch = {}
  for k, v in features.items():
    if v.ndim == 2:   # token fields: each example's tokens at its place in the row
      batch[k] = np.where(valid, v[who, pos], 0).astype(v.dtype)
    else:             # example fields: one per slot
      batch[k] = np.where(real, v[safe], 0).astype(v.dtype).reshape(-1)
  batch["positions"] = pos.astype(np.int32)
  batch["packed_segment_ids"] = np.where(valid, slot + 1, 0).astype(np.int32)
  batch["example_starts"] = starts.astype(np.int32).reshape(-1)
  batch["example_weight"] = real.astype(np.float32).reshape(-1)
  batch["feature_index"] = np.where(real, members, -1).astype(np.int32).reshape(-1)
  return batch


def train_iterator(features: dict, fields: tuple, plan: PackPlan, rows: int,
                   shard_index: int, shard_count: int, seed: int):
  """Endless checkpointable iterator of `rows`-row packed batches of this shard."""
  ds = grain.MapDataset.range(sys.maxsize)  # batch numbers over an endless row stream
  ds = ds.map(EpochBatchKeys(plan, rows, shard_index, shard_count, seed))
  ds = ds.map(PackedRows(features, fields, plan, seed))
  return iter(ds.to_iter_dataset())


def eval_iterator(features: dict, fields: tuple, plan: PackPlan, rows: int,
                  shard_index: int, shard_count: int):
  """Every feature of this shard once, packed (rows p, p + S, ..., empty rows padding
  the last batch, so every process runs the same number of batches)."""
  indices = sampling.eval_shard_indices(plan.num_rows, rows, shard_index, shard_count)
  ds = grain.MapDataset.range(len(indices) // rows)
  ds = ds.map(sampling.EvalKeys(indices, rows))
  return iter(ds.map(PackedRows(features, fields, plan)).to_iter_dataset())


def dummy_batch(features: dict, fields: tuple, rows: int, row_length: int,
                max_per_row: int) -> dict:
  """A packed batch of `rows` rows for init / eval_shape: the features' first examples,
  or, before there are features, zeros of the model inputs."""
  if len(features.get("input_ids", ())):
    take = {k: features[k] for k in fields if k in features}
    members = np.full((rows, max_per_row), -1, np.int64)  # one example a row: only the
    n = min(len(features["input_ids"]), rows)              # shapes and fields matter here
    members[:n, 0] = np.arange(n)
    lengths = features["input_mask"].sum(axis=1).astype(np.int64)
    return rows_of(take, members, lengths, row_length)
  zeros = lambda *s: np.zeros(s, np.int32)
  batch = {k: zeros(rows, row_length) for k in ("input_ids", "input_mask", "segment_ids",
                                                  "positions", "packed_segment_ids")}
  batch.update(example_starts=zeros(rows * max_per_row),
               example_weight=np.zeros(rows * max_per_row, np.float32),
               feature_index=np.full(rows * max_per_row, -1, np.int32))
  return batch
