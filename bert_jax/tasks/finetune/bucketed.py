"""Fine-tuning batches in length buckets (bert_jax/data/buckets.py), for SQuAD's windows.

The same rows as the padded path (tasks/finetune/base.py `_batches`, `train_iterator`),
cut to their batch's bucket length: a row of the features is [L] with its real tokens
first, so its first `length` positions are all it holds when length >= its tokens.
Train batches are full (every row an example), eval/predict batches flag padding rows
with feature_index -1 and example_weight 0, as the padded path does.
"""
from __future__ import annotations

import sys

import grain
import numpy as np

from bert_jax.data import buckets


class BucketRows:
  """(keys [B, 2] (epoch, feature index; -1 = padding row), length) -> a dict of rows,
  the per-token fields cut to `length` ([B, length]); per-row fields as they are."""

  def __init__(self, features: dict, fields: tuple):
    self.features = {k: features[k] for k in fields if k in features}

  def __call__(self, item) -> dict:
    keys, length = item
    index = keys[:, 1]
    real = index >= 0
    at = np.maximum(index, 0)
    rows = {k: (v[at, :length] if v.ndim == 2 else v[at]) for k, v in self.features.items()}
    rows["example_weight"] = real.astype(np.float32)
    rows["feature_index"] = np.where(real, index, -1).astype(np.int32)
    return rows


def row_lengths(features: dict) -> np.ndarray:
  """[F] real tokens of each row (input_mask's ones, which come first)."""
  return np.asarray(features["input_mask"], np.int64).sum(axis=1)


def train_iterator(features: dict, fields: tuple, lengths: np.ndarray, batch_size: int,
                   shard_index: int, shard_count: int, seed: int, window_batches: int):
  """Endless checkpointable iterator of this process's bucketed train batches."""
  keys = buckets.BucketTrainKeys(row_lengths(features), lengths, batch_size, shard_index,
                                 shard_count, seed, window_batches)
  ds = grain.MapDataset.range(sys.maxsize).map(keys).map(BucketRows(features, fields))
  return iter(ds.to_iter_dataset())


def eval_iterator(features: dict, fields: tuple, lengths: np.ndarray, batch_size: int,
                  shard_index: int, shard_count: int):
  """Every feature of this shard once, batched by bucket (padding rows: index -1)."""
  plan = buckets.eval_plan(row_lengths(features), lengths, batch_size, shard_index,
                           shard_count)
  ds = grain.MapDataset.range(len(plan)).map(plan).map(BucketRows(features, fields))
  return iter(ds.to_iter_dataset())
