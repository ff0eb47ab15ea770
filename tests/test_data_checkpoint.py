"""data_checkpoint: the iterator state per row shard, resumed on another layout or refused."""
import json
import sys

import grain
import pytest
from etils import epath

from bert_jax.checkpoint import data_state as dc
from bert_jax.data import sampling


def _stream(shard: int, count: int, rows: int):
  """A TrainKeys iterator of `rows` rows a batch (the loops' train stream): 100 examples."""
  ds = grain.MapDataset.range(sys.maxsize).map(
      sampling.TrainKeys(100, rows, shard, count, seed=0))
  return iter(ds.to_iter_dataset())


def _save(directory, layouts_and_iterators):
  for layout, it in layouts_and_iterators:
    dc.Handler().save(epath.Path(directory), dc.Save(it, layout))


def _global_batch(iterators) -> set:
  return {tuple(r) for it in iterators for r in next(it).tolist()}


def test_a_stream_saved_on_two_shards_continues_on_one_and_on_four(tmp_path):
  """Two shards of 8 rows at global batch 3 -> one shard of 16 or four of 4: the next
  global batch holds the same examples (sampling.TrainKeys: batch j of any shard count)."""
  two = [_stream(i, 2, 8) for i in range(2)]
  for _ in range(3):
    _global_batch(two)
  _save(tmp_path, [(dc.Layout(i, 2, True, i, 2), it) for i, it in enumerate(two)])
  want = _global_batch(two)  # global batch 3, as the uninterrupted run reads it
  for count, rows in [(1, 16), (4, 4), (2, 8)]:
    resumed = [dc.Handler().restore(epath.Path(tmp_path),
                                    dc.Restore(_stream(i, count, rows), dc.Layout(i, count)))
               for i in range(count)]
    assert _global_batch(resumed) == want, count
  assert sorted(f.name for f in tmp_path.iterdir()) == ["shard_0-of-2.json", "shard_1-of-2.json"]
  # Only the first process of a shard writes its file (the others hold the same state).
  (tmp_path / "b").mkdir()
  _save(tmp_path / "b", [(dc.Layout(0, 1, False, 1, 2), _stream(0, 1, 16))])
  assert not list((tmp_path / "b").iterdir())


def test_a_state_tied_to_its_shard_is_refused_on_another_layout(tmp_path):
  state = {"next_index": 4, "packer": {"buffered": [1, 2]}}
  for i in range(2):
    (tmp_path / f"shard_{i}-of-2.json").write_text(json.dumps(dict(state, shard=i)))
  with pytest.raises(dc.DataLayoutError, match=r"saved by 2 row shards and this run reads 1 "
                     r"\(shard 0\).*cannot continue exactly. Resume with the mesh and process "
                     "count that saved it"):
    dc.Handler().restore(epath.Path(tmp_path), dc.Restore(_stream(0, 1, 16), dc.Layout(0, 1)))
  # The same layout resumes it (each shard its own file).
  got = dc.Handler().restore(epath.Path(tmp_path),
                             dc.Restore(_StateSink(), dc.Layout(1, 2, False, 3, 4)))
  assert got.state == dict(state, shard=1)


def test_grain_handlers_per_process_files_still_restore(tmp_path):
  (tmp_path / "process_1-of-2.json").write_text(json.dumps({"next_index": 5}))
  (tmp_path / "process_0-of-2.json").write_text(json.dumps({"next_index": 5}))
  got = dc.Handler().restore(epath.Path(tmp_path),
                             dc.Restore(_StateSink(), dc.Layout(1, 2, True, 1, 2)))
  assert got.state == {"next_index": 5}


class _StateSink:
  def set_state(self, state):
    self.state = state
