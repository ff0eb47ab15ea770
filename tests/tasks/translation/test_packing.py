"""Batches by token count: pairs packed into rows compute exactly what they would alone."""
import math

import flax.linen as nn
import jax
import numpy as np
import pytest

from bert_jax.tasks import registry
from bert_jax.tasks.translation import batches
from tests.tasks.translation.conftest import config_module, translation_config


class _Rows:
  """n pairs with known lengths; pair i's tokens are all 4 + i (ids 0..3 are specials)."""

  def __init__(self, n: int, width: int = 10, seed: int = 0):
    rng = np.random.default_rng(seed)
    self.lengths = rng.integers(1, width + 1, size=(n, 2))
    self.width = width

  def __len__(self):
    return len(self.lengths)

  def rows(self, index):
    out = {}
    for side, name in enumerate(("src_ids", "tgt_ids")):
      a = np.zeros((len(index), self.width), np.int32)
      for r, i in enumerate(index):
        a[r, :self.lengths[i, side]] = 4 + i
      out[name] = a
    return out


def _pairs_of(batch):
  """{pair id: (source length, target length)} of a packed batch, checking its layout."""
  found = {}
  for row in range(len(batch["src_ids"])):
    for side in ("src", "tgt"):
      ids, seg, pos = (batch[f"{side}_{k}"][row] for k in ("ids", "segment_ids", "positions"))
      assert np.all((ids > 0) == (seg > 0))
      for s in np.unique(seg[seg > 0]):
        at = np.flatnonzero(seg == s)
        assert np.all(np.diff(at) == 1), "a pair is contiguous"
        np.testing.assert_array_equal(pos[at], np.arange(len(at)))  # positions restart
        (pair,) = np.unique(ids[at]) - 4
        key = (row, int(s))
        found.setdefault(key, {})[side] = (int(pair), len(at))
  out = {}
  for key, sides in found.items():
    assert sides["src"][0] == sides["tgt"][0], f"segment {key} pairs one source and target"
    out[sides["src"][0]] = (sides["src"][1], sides["tgt"][1])
  return out


def test_packed_batches_hold_every_pair_once_whole_and_resume_exactly():
  source = _Rows(60)
  it = batches.packed_train_batches(source, batch_size=4, pack_length=16, shard_index=0,
                                    shard_count=1, seed=3)
  seen = {}
  slots = 0
  while len(seen) < 60:
    b = next(it)
    assert b["src_ids"].shape == b["tgt_ids"].shape == (4, 16)
    got = _pairs_of(b)
    # Pairs come in stream order: only the batch that completes the epoch may hold pairs
    # of the next epoch, so a repeat before that would be a lost or duplicated pair.
    completes = len(set(seen) | set(got)) == 60
    for pair, lengths in got.items():
      assert pair not in seen or completes, f"pair {pair} twice within the first epoch"
      seen[pair] = lengths
    slots += 2 * b["src_ids"].size
  for pair, lengths in seen.items():  # no pair cut
    assert lengths == tuple(source.lengths[pair])
  # The rows are full: far more than one pair a row (one pair a row would fill ~34%).
  assert source.lengths.sum() / slots > 0.6
  # The iterator's state is a checkpoint: restored, it continues with the same batches.
  state = it.get_state()
  expect = [next(it) for _ in range(3)]
  again = batches.packed_train_batches(source, 4, 16, 0, 1, seed=3)
  again.set_state(state)
  for want in expect:
    got = next(again)
    for k in want:
      np.testing.assert_array_equal(got[k], want[k])


def test_processes_pack_disjoint_pairs():
  source = _Rows(40)
  mine = [set(_pairs_of(next(batches.packed_train_batches(source, 2, 16, p, 2, seed=0))))
          for p in (0, 1)]
  assert mine[0] and mine[1] and not mine[0] & mine[1]


@pytest.fixture(scope="module")
def packed_task():
  config = translation_config("transformer/base")
  config.data.update(source="numbers", pack_length=24, vocab_size=64)
  config.decode.eval_beam_size = 0  # logits only
  task = registry.get_task(config)
  # Jitted here and below: one compile per input layout instead of eager op-by-op dispatch.
  return task, jax.jit(task.init)(jax.random.key(0), task.dummy_batch(2))["params"]


def test_a_packed_row_gives_each_pair_its_unpacked_logits_and_loss(packed_task):
  task, params = packed_task
  params = nn.meta.unbox(params)
  rng = np.random.default_rng(0)
  pairs = [(rng.integers(4, 64, size=n), rng.integers(4, 64, size=m))
           for n, m in ((5, 7), (3, 2), (9, 11))]
  packed = {k: np.zeros((1, 24), np.int32) for k in (
      "src_ids", "tgt_ids", "src_segment_ids", "tgt_segment_ids", "src_positions",
      "tgt_positions")}
  at = {"src": 0, "tgt": 0}
  for s, pair in enumerate(pairs, start=1):
    for side, ids in zip(("src", "tgt"), pair):
      span = slice(at[side], at[side] + len(ids))
      packed[f"{side}_ids"][0, span] = ids
      packed[f"{side}_segment_ids"][0, span] = s
      packed[f"{side}_positions"][0, span] = np.arange(len(ids))
      at[side] += len(ids)
  packed.update(example_weight=np.ones(1, np.float32), feature_index=np.full(1, -1, np.int32))
  logits = jax.jit(lambda p, b: task.apply(p, b, None, train=False)["logits"])
  got = logits(params, packed)[0]                                       # [24, V]
  tgt_start = 0
  for src, tgt in pairs:
    alone = {"src_ids": np.zeros((1, 24), np.int32), "tgt_ids": np.zeros((1, 24), np.int32),
             "example_weight": np.ones(1, np.float32)}
    alone["src_ids"][0, :len(src)] = src
    alone["tgt_ids"][0, :len(tgt)] = tgt
    want = logits(params, alone)[0, :len(tgt)]
    np.testing.assert_allclose(got[tgt_start:tgt_start + len(tgt)], want, atol=1e-5)
    tgt_start += len(tgt)
  # The loss over the packed row is the token-weighted loss of the three pairs.
  weight = task.loss_weights(packed)["translation"]
  assert float(weight) == sum(len(t) for _, t in pairs)


def test_packed_rows_train_through_the_loop(tmp_path):
  config = translation_config("numbers")
  config.data.pack_length = 24
  result = registry.run(config, str(tmp_path))
  assert result["step"] == 2 and math.isfinite(result["train/loss"])
  assert 0.0 <= result["eval/bleu"] <= 100.0


def test_packing_needs_room_and_the_transformer():
  config = translation_config("numbers")
  config.data.pack_length = 8          # shorter than a 20-subword target
  with pytest.raises(ValueError, match="pack_length=8 must hold the longest pair"):
    registry.get_task(config)
  config = translation_config("numbers_gru")
  config.data.pack_length = 24
  with pytest.raises(ValueError, match="needs architecture='transformer'"):
    registry.get_task(config)


def test_bf16_matmuls_are_refused_for_the_gru():
  """translate --matmul_dtype on a GRU workdir (or a GRU config) is an error, not a no-op."""
  config = translation_config("numbers_gru")
  config.model.matmul_dtype = "bfloat16"
  with pytest.raises(ValueError, match="architecture='gru' does not use it"):
    registry.get_task(config)
  config.model.matmul_dtype = None
  assert registry.get_task(config).architecture == "gru"


def test_the_paper_recipe_batches_by_token_count():
  module = config_module()
  for arg in ("transformer/base", "transformer/big"):
    c = module.get_config(arg)
    # 128 rows x 256 subwords a side: ~25k source and ~25k target tokens at ~80% fill.
    assert c.data.pack_length == 256 and c.train.batch_size == 128
    assert c.data.pack_length <= c.model.max_len
  assert module.get_config("numbers").data.pack_length == 0
