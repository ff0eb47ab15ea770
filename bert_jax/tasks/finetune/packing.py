"""Packed fine-tuning rows (data.packing): several examples a row, classification and NER.

Fine-tuning examples are short (polarity: 28 tokens on average, at max_seq_length 64 or
128), so one example a row padded to max_seq_length computes mostly padding. Here the
examples of a split are packed into rows of max_seq_length tokens by first-fit
decreasing (data/packing.py), at most K = data.max_examples_per_row a row, and each
example keeps its own [CLS] .. [SEP], token types and positions from 0, and attends
only to itself (packed_segment_ids: BertModel's block-diagonal mask), so its outputs
are those of the padded path (tests/tasks/finetune/test_packing.py).

Batch dict (R rows, L = data.max_seq_length, K = data.max_examples_per_row):
  input_ids, input_mask, segment_ids  int32   [R, L]   examples back to back; 0 after
  positions                           int32   [R, L]   0.. in every example
  packed_segment_ids                  int32   [R, L]   slot k of the row is k + 1; 0 = pad
  NER labels, label_weights                   [R, L]   the token fields, laid out alike
  example_starts                      int32   [R*K]    first token ([CLS]) of each slot
  classification labels                       [R*K]    the per-example fields, by slot
  example_weight                      float32 [R*K]    1 on filled slots, 0 on empty ones
  feature_index                       int32   [R*K]    the slot's feature, -1 = empty slot
Per-example arrays are flat, R*K long, so the losses, metrics and `ordered` of the
padded path apply to them unchanged (logits come back [R*K, classes]).

Training: FFD gives every epoch the same number of rows M (it depends only on the
sorted lengths), so the row stream is sampling.TrainKeys over M rows: a fresh row order
every epoch, a pure function of (seed, position), and the grain iterator's state is
its position (exact resume, as the padded path). Which examples share a row also
changes every epoch: ties in length are broken by the epoch's shuffle of the examples.
"""
from __future__ import annotations

import sys

import grain
import numpy as np

from bert_jax.data import sampling
from bert_jax.data.packing import first_fit_decreasing, members_by_row

_MEMBER_STREAM = 2**64 - 2  # example_keys index of the example shuffle (TrainKeys: 2^64 - 1)


class PackPlan:
  """How the features of a split fill rows: FFD's structure, and each epoch's members."""

  def __init__(self, features: dict, row_length: int, max_per_row: int):
    self.lengths = features["input_mask"].sum(axis=1).astype(np.int64)   # [N]
    self.row_length, self.max_per_row = row_length, max_per_row
    descending = np.sort(self.lengths)[::-1]
    # [M, K] ranks (0 = the longest example) of each row's examples, -1 = empty slot.
    self.rank_rows = members_by_row(first_fit_decreasing(descending, row_length, max_per_row),
                                    max_per_row)
    self.num_rows = len(self.rank_rows)
    self.fill = float(self.lengths.sum()) / max(1, self.num_rows * row_length)
    self._epochs: dict = {}  # (seed, epoch) -> members: the last two epochs seen

  def members(self, order: np.ndarray) -> np.ndarray:
    """[M, K] feature indices of each row (-1 = empty) when FFD sees the features in
    `order`: equally long features are placed in that order."""
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

  def summary(self, rows_per_step: int) -> str:
    n = len(self.lengths)
    per_row = n / max(1, self.num_rows)
    return (f"packing: {n} examples in {self.num_rows} rows of {self.row_length} "
            f"(first-fit decreasing, <= {self.max_per_row} a row): {100 * self.fill:.1f}% "
            f"real tokens, {per_row:.2f} examples a row, ~{rows_per_step * per_row:.0f} "
            f"examples a step of {rows_per_step} rows")


class PackedRows:
  """Row keys [R, 2] (epoch, row; -1 = empty row) -> a packed batch dict.

  seed: training rows, the examples of each epoch shuffled by it; None: evaluation,
  the features in their own order (every row the same at every evaluation)."""

  def __init__(self, features: dict, fields: tuple, plan: PackPlan, seed=None):
    self.features = {k: features[k] for k in fields if k in features}
    self.plan, self.seed = plan, seed
    self._eval_members = (plan.members(np.arange(len(plan.lengths))) if seed is None
                          else None)

  def _members(self, keys: np.ndarray) -> np.ndarray:
    out = np.full((len(keys), self.plan.max_per_row), -1, np.int64)     # [R, K]
    for epoch in np.unique(keys[:, 0]):
      at = (keys[:, 0] == epoch) & (keys[:, 1] >= 0)
      table = (self._eval_members if self.seed is None
               else self.plan.epoch_members(self.seed, int(epoch)))
      out[at] = table[keys[at, 1]]
    return out

  def __call__(self, keys: np.ndarray) -> dict:
    return rows_of(self.features, self._members(keys), self.plan.lengths,
                   self.plan.row_length)


def rows_of(features: dict, members: np.ndarray, lengths: np.ndarray, row_length: int) -> dict:
  """The packed batch of `members` [R, K] (feature indices, -1 = empty slot)."""
  real = members >= 0                                            # [R, K]
  safe = np.maximum(members, 0)
  lens = np.where(real, lengths[safe], 0)                        # [R, K]
  ends = np.cumsum(lens, axis=1)
  starts = ends - lens                                           # [R, K]
  t = np.arange(row_length)
  valid = t[None, :] < ends[:, -1:]                              # [R, L] inside an example
  # Slots are filled from 0, so the slot of token t is the number of examples ending <= t.
  slot = np.minimum((t[None, None, :] >= ends[:, :, None]).sum(axis=1),
                    members.shape[1] - 1)                        # [R, L]
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
  batch["example_starts"] = np.where(real, starts, 0).astype(np.int32).reshape(-1)
  batch["example_weight"] = real.astype(np.float32).reshape(-1)
  batch["feature_index"] = np.where(real, members, -1).astype(np.int32).reshape(-1)
  return batch


def train_iterator(features: dict, fields: tuple, plan: PackPlan, rows: int,
                   shard_index: int, shard_count: int, seed: int):
  """Endless checkpointable iterator of `rows`-row packed batches of this shard."""
  ds = grain.MapDataset.range(sys.maxsize)  # batch numbers over an endless row stream
  ds = ds.map(sampling.TrainKeys(plan.num_rows, rows, shard_index, shard_count, seed))
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
