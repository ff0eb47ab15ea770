"""Length buckets (bert_jax/data/buckets.py): numpy only, no compiles."""
import collections

import numpy as np
import pytest

from bert_jax.data import buckets
from bert_jax.tasks.finetune import bucketed


def test_bucket_lengths_are_multiples_of_the_step_then_the_maximum():
  assert buckets.bucket_lengths(384, 64).tolist() == [64, 128, 192, 256, 320, 384]
  assert buckets.bucket_lengths(100, 32).tolist() == [32, 64, 96, 100]
  assert buckets.bucket_lengths(128, 0).tolist() == [128]      # the padded path
  assert buckets.bucket_lengths(48, 64).tolist() == [48]
  b = buckets.bucket_lengths(100, 32)
  assert buckets.bucket_of([1, 32, 33, 97, 100], b).tolist() == [32, 32, 64, 100, 100]
  with pytest.raises(ValueError, match="101 tokens exceeds the longest bucket 100"):
    buckets.bucket_of([101], b)


LENGTHS = np.random.default_rng(0).integers(3, 49, size=45)   # [45] real tokens a row
BUCKETS = buckets.bucket_lengths(48, 16)


def _stream(batch_size, shard_index, shard_count, steps, seed=7):
  keys = buckets.BucketTrainKeys(LENGTHS, BUCKETS, batch_size, shard_index, shard_count,
                                 seed, window_batches=3)
  return [keys(j) for j in range(steps)]


def test_train_batches_cover_each_epoch_once_sorted_within_windows():
  # 45 examples, batch 5, windows of 3 batches: 9 batches an epoch, 3 windows.
  batches = _stream(5, 0, 1, steps=18)
  seen = collections.Counter()
  for keys, length in batches:
    assert keys.shape == (5, 2)
    # The batch's bucket is the smallest holding its longest row.
    assert length == buckets.bucket_of(LENGTHS[keys[:, 1]].max(), BUCKETS)
    seen.update(map(tuple, keys.tolist()))
  assert sorted(seen) == [(e, i) for e in (0, 1) for i in range(45)]   # each once an epoch
  assert set(seen.values()) == {1}
  for w in range(6):  # within a window the batches are length ranges that do not overlap
    spans = sorted((LENGTHS[k[:, 1]].min(), LENGTHS[k[:, 1]].max())
                   for k, _ in batches[3 * w:3 * w + 3])
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
  # Epochs differ (a fresh shuffle), and sorting cuts the padding of 16-token buckets.
  assert [k.tolist() for k, _ in batches[:9]] != [k.tolist() for k, _ in batches[9:]]
  rows = [(k, 48) for k, _ in batches]
  assert buckets.fill_rate(LENGTHS, batches) > buckets.fill_rate(LENGTHS, rows) + 0.15


def test_processes_agree_on_each_batch_and_split_its_rows():
  one = _stream(6, 0, 1, steps=4)
  parts = [_stream(2, p, 3, steps=4) for p in range(3)]
  for j, (keys, length) in enumerate(one):
    assert {parts[p][j][1] for p in range(3)} == {length}   # one shape on every process
    merged = np.stack([parts[p][j][0] for p in range(3)], axis=1).reshape(-1, 2)
    np.testing.assert_array_equal(merged, keys)              # rows p, p + 3, ... of it


def test_train_iterator_resumes_exactly_from_its_state():
  features = {"input_ids": np.arange(45 * 48).reshape(45, 48).astype(np.int32),
              "input_mask": (np.arange(48) < LENGTHS[:, None]).astype(np.int32),
              "segment_ids": np.zeros((45, 48), np.int32)}
  fields = ("input_ids", "input_mask", "segment_ids")
  make = lambda: bucketed.train_iterator(features, fields, BUCKETS, 4, 0, 1, 3, 2)
  it = make()
  for _ in range(5):
    next(it)
  state = it.get_state()
  want = [next(it) for _ in range(7)]
  again = make()
  again.set_state(state)
  for a, b in zip(want, [next(again) for _ in range(7)]):
    assert a.keys() == b.keys()
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])
  for batch in want:  # rows cut to the bucket, their real tokens all kept
    length = batch["input_ids"].shape[1]
    assert length in BUCKETS and batch["input_mask"].shape == (4, length)
    np.testing.assert_array_equal(batch["input_mask"].sum(1),
                                  LENGTHS[batch["feature_index"]])
    np.testing.assert_array_equal(batch["input_ids"],
                                  features["input_ids"][batch["feature_index"], :length])


@pytest.mark.parametrize("shard_count", [1, 2])
def test_eval_plan_holds_every_row_once_sorted_by_length(shard_count):
  plans = [buckets.eval_plan(LENGTHS, BUCKETS, 4, p, shard_count)
           for p in range(shard_count)]
  assert len({len(p) for p in plans}) == 1                   # the same number of batches
  rows = np.concatenate([p.indices.ravel() for p in plans])
  assert sorted(rows[rows >= 0].tolist()) == list(range(45))
  assert all((p.indices[1:] >= 0).all() for p in plans)      # padding in the first batch only
  longest = np.zeros(len(plans[0]), np.int64)
  for p in plans:
    np.testing.assert_array_equal(p.lengths, plans[0].lengths)   # the same shapes
    for b, index in enumerate(p.indices):
      longest[b] = max(longest[b], LENGTHS[index[index >= 0]].max(initial=0))
  # Each batch in the bucket of its longest row (of all processes); lengths ascend.
  np.testing.assert_array_equal(plans[0].lengths, buckets.bucket_of(longest, BUCKETS))
  assert (np.diff(longest) >= 0).all() and sorted(set(plans[0].lengths)) == [16, 32, 48]


def test_two_sided_plan_sorts_by_first_bucket_then_second_length():
  rng = np.random.default_rng(1)
  lengths = np.stack([LENGTHS, rng.integers(1, 41, size=45)], axis=1)   # [45, 2]
  sides = (BUCKETS, buckets.bucket_lengths(40, 8))
  plan = buckets.eval_plan(lengths, sides, 4)
  one = buckets.eval_plan(LENGTHS, BUCKETS, 4)
  rows = plan.indices.ravel()
  assert sorted(rows[rows >= 0].tolist()) == list(range(45))
  keys, shape = plan(3)
  assert isinstance(shape, tuple) and len(shape) == 2 and keys.shape == (4, 2)
  for b, index in enumerate(plan.indices):
    real = lengths[index[index >= 0]]
    np.testing.assert_array_equal(plan.lengths[b],
                                  [buckets.bucket_of(real[:, s].max(), sides[s])
                                   for s in range(2)])
  # The first side's buckets batch by batch are those of sorting by its length alone;
  # within a first-side bucket the rows ascend by the second side's length.
  np.testing.assert_array_equal(plan.lengths[:, 0], one.lengths)
  first = buckets.bucket_of(lengths[rows[rows >= 0], 0], BUCKETS)
  second = lengths[rows[rows >= 0], 1]
  assert (np.diff(first) >= 0).all()
  assert all((np.diff(second[first == b]) >= 0).all() for b in BUCKETS)
  with pytest.raises(ValueError, match="2 length columns but 1 bucket sets"):
    buckets.eval_plan(lengths, (BUCKETS,), 4)
