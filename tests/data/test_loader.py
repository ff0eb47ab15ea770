"""The iterators over prepared fixture data: values, determinism, state, sharding."""
import itertools
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bert_jax.data import loader, sampling
from bert_jax.data.prepare import prepare


def take(it, n):
  return [next(it) for _ in range(n)]


def assert_same_batches(xs, ys):
  assert len(xs) == len(ys)
  for x, y in zip(xs, ys):
    assert x.keys() == y.keys()
    for k in x:
      np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def test_train_batch_values(tiny):
  cfg, prepared = tiny
  batch = next(loader.make_train_iterator(cfg, prepared, 8, shard_index=0, shard_count=1))
  assert tuple(batch) == loader.BATCH_KEYS
  shapes = {k: v.shape for k, v in batch.items()}
  assert shapes["input_ids"] == shapes["input_mask"] == shapes["segment_ids"] == (8, 64)
  assert shapes["masked_lm_positions"] == shapes["masked_lm_weights"] == (8, 10)
  assert shapes["next_sentence_labels"] == shapes["next_sentence_weights"] == (8,)
  for key in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
              "masked_lm_ids", "next_sentence_labels"):
    assert batch[key].dtype == np.int32, key
  ids, mask, seg = batch["input_ids"], batch["input_mask"], batch["segment_ids"]
  lengths = mask.sum(1)
  assert (mask == (np.arange(64) < lengths[:, None])).all()
  assert (ids[mask == 0] == 0).all() and (seg[mask == 0] == 0).all()
  assert (ids[:, 0] == 101).all()  # [CLS]
  # Segment 1 starts right after the first [SEP] and runs to the last real token.
  for row, n in zip(range(8), lengths):
    sep = int(np.flatnonzero(ids[row] == 102)[0])
    np.testing.assert_array_equal(seg[row, :n], np.arange(n) > sep)
  w = batch["masked_lm_weights"] > 0
  pos = batch["masked_lm_positions"]
  assert (pos[w] < np.repeat(lengths, w.sum(1))).all() and (pos[w] > 0).all()
  expected = np.minimum(10, np.maximum(1, np.rint((lengths - 3) * 0.15)))  # 3 specials a row
  np.testing.assert_array_equal(w.sum(1), expected)
  assert set(np.unique(batch["next_sentence_labels"])) <= {0, 1}
  assert (batch["next_sentence_weights"] == 1).all()


def occurrences(stream, span):
  """Start positions of `span` in `stream` (1-D int arrays)."""
  if len(span) > len(stream):
    return np.zeros(0, int)
  windows = np.lib.stride_tricks.sliding_window_view(stream, len(span))
  return np.flatnonzero((windows == span).all(axis=1))


def test_stored_nsp_pairs_continue_the_source_text(tiny):
  cfg, prepared = tiny
  tok = prepared.tokenizer()
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  streams = []  # each document's token ids
  for split in ("train", "validation"):
    for d in tfds.builder_from_directory(prepared.documents_dir).as_data_source(split=split):
      streams.append(np.array([i for s in d["text"].decode().split("\n")
                               for i in tok.encode(s, add_special_tokens=False).ids]))
  source = loader.InstanceSource(prepared.instances_dir, "train")
  seen = {0: 0, 1: 0}
  for i in range(len(source)):
    ids, seg, random_next = source[i]
    start_b = int(np.argmax(seg))
    a, b = ids[1:start_b - 1], ids[start_b:-1]
    a_at = [occurrences(s, a) for s in streams]
    b_at = [occurrences(s, b) for s in streams]
    assert any(len(x) for x in a_at) and any(len(x) for x in b_at)  # verbatim corpus spans
    seen[random_next] += 1
    # B follows A in one document, with at most the truncated tokens between them.
    follows = any(((0 <= gap) & (gap <= 61)).any()
                  for x, y in zip(a_at, b_at) for gap in [y[None, :] - (x[:, None] + len(a))])
    if not random_next:
      assert follows, (tok.decode(a.tolist()), tok.decode(b.tolist()))
  assert seen[0] > 30 and seen[1] > 30


def test_same_seed_same_batches_other_seed_other_batches(tiny):
  cfg, prepared = tiny
  make = lambda seed: loader.make_train_iterator(cfg, prepared, 8, seed=seed, shard_index=0,
                                                 shard_count=1)
  assert_same_batches(take(make(1), 5), take(make(1), 5))
  a, b = next(make(1)), next(make(2))
  assert not np.array_equal(a["input_ids"], b["input_ids"])


def test_iterator_state_restores_the_exact_stream(tiny):
  cfg, prepared = tiny
  make = lambda: loader.make_train_iterator(cfg, prepared, 8, shard_index=0, shard_count=1)
  it = make()
  take(it, 30)  # past the first epoch (180 / 8 = 22.5 batches)
  state = it.get_state()
  expected = take(it, 5)
  resumed = make()
  resumed.set_state(json.loads(json.dumps(state)))  # as the checkpoint stores it
  assert_same_batches(take(resumed, 5), expected)


def test_fresh_order_and_masks_every_epoch(tiny):
  cfg, prepared = tiny
  n = prepared.num_examples["train"]
  keys = sampling.TrainKeys(n, batch_size=n, shard_index=0, shard_count=1, seed=0)
  epoch0, epoch1 = keys(0), keys(1)
  assert (epoch0[:, 0] == 0).all() and (epoch1[:, 0] == 1).all()
  np.testing.assert_array_equal(np.sort(epoch0[:, 1]), np.arange(n))
  assert (epoch0[:, 1] != epoch1[:, 1]).mean() > 0.9


def test_process_shards_are_disjoint_and_cover_each_epoch(tiny):
  cfg, prepared = tiny
  n = prepared.num_examples["train"]
  # One batch of n per process spans epochs 0 and 1 of the global stream.
  rows = [sampling.TrainKeys(n, n, p, 2, seed=3)(0) for p in range(2)]
  epoch0 = [r[r[:, 0] == 0, 1] for r in rows]
  assert abs(len(epoch0[0]) - len(epoch0[1])) <= 1
  assert not set(epoch0[0]) & set(epoch0[1])
  np.testing.assert_array_equal(np.sort(np.concatenate(epoch0)), np.arange(n))
  # End to end: the two processes' batch j, interleaved, is the one-process batch j.
  make = lambda p, s, b: loader.make_train_iterator(cfg, prepared, b, shard_index=p,
                                                    shard_count=s)
  single, p0, p1 = make(0, 1, 16), make(0, 2, 8), make(1, 2, 8)
  for _ in range(3):
    whole, a, b = next(single), next(p0), next(p1)
    for k in whole:
      np.testing.assert_array_equal(whole[k][0::2], a[k], err_msg=k)
      np.testing.assert_array_equal(whole[k][1::2], b[k], err_msg=k)


def test_eval_iterator_is_finite_padded_and_complete(tiny):
  cfg, prepared = tiny
  n = prepared.num_examples["validation"]
  per_process = []
  for p in range(2):
    batches = list(loader.make_eval_iterator(cfg, prepared, 8, shard_index=p, shard_count=2))
    expected = -(-(-(-n // 2)) // 8)  # ceil(ceil(n / 2) / 8) on each process
    assert len(batches) == len(sampling.eval_shard_indices(n, 8, p, 2)) // 8 == expected
    per_process.append(batches)
  weights = np.concatenate([b["next_sentence_weights"] for bs in per_process for b in bs])
  assert weights.sum() == n  # every validation instance once, the rest padding
  for b in itertools.chain(*per_process):
    pad = b["next_sentence_weights"] == 0
    assert (b["masked_lm_weights"][pad] == 0).all() and (b["input_mask"][pad] == 0).all()
  again = list(loader.make_eval_iterator(cfg, prepared, 8, shard_index=0, shard_count=2))
  assert_same_batches(again, per_process[0])


def test_packed_mlm_mode(data_root, make_config):
  cfg = make_config(data_root, mode="mlm_packed", whole_word_mask=True, random_token="uniform")
  prepared = prepare(cfg, verbose=False)
  batch = next(loader.make_train_iterator(cfg, prepared, 8, shard_index=0, shard_count=1))
  ids, seg, mask = batch["input_ids"], batch["segment_ids"], batch["input_mask"]
  assert (batch["next_sentence_weights"] == 0).all()
  assert (seg[mask == 0] == 0).all() and (seg[mask == 1] >= 1).all()
  assert seg.max() >= 2  # FULL-SENTENCES rows hold several documents
  assert (mask.sum(1) > 50).mean() > 0.5  # rows are packed


def test_host_to_global_shards_the_batch_dimension(tiny):
  """The loop's host -> device step (parallel.host_to_global) on a loader batch."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax.sharding import PartitionSpec  # pylint: disable=g-import-not-at-top
  from bert_jax.runtime import parallel  # pylint: disable=g-import-not-at-top
  cfg, prepared = tiny
  batch = next(loader.make_train_iterator(cfg, prepared, 16, shard_index=0, shard_count=1))
  mesh = parallel.create_mesh((4, 2, 1), jax.devices())
  arrays = parallel.host_to_global(batch, mesh)
  for k, v in arrays.items():
    assert v.sharding.spec[0] == ("data", "fsdp")
    np.testing.assert_array_equal(np.asarray(v), batch[k])
    assert v.addressable_shards[0].data.shape[0] == 2  # 16 rows over 8 devices


def test_checkpointer_saves_and_restores_the_iterator(tiny, tmp_path):
  """The loop's checkpoints (checkpoint.Checkpointer) carry the iterator's position."""
  from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
  cfg, prepared = tiny
  make = lambda: loader.make_train_iterator(cfg, prepared, 8, shard_index=0, shard_count=1)
  it = make()
  take(it, 7)
  ckpt = checkpoint.Checkpointer(str(tmp_path / "ckpt"), async_save=False)
  ckpt.save(7, {"step": np.array(7, np.int32)}, {"task": "test"}, data_iterator=it)
  ckpt.wait()
  expected = take(it, 3)
  resumed = make()
  state, meta, step = ckpt.restore({"step": np.array(0, np.int32)}, data_iterator=resumed)
  ckpt.close()
  assert step == 7 and int(state["step"]) == 7 and meta["task"] == "test"
  assert_same_batches(take(resumed, 3), expected)


def test_prepare_and_load_never_import_tensorflow(tmp_path, make_config):
  cfg = make_config(tmp_path)
  script = textwrap.dedent(f"""
      import sys
      import ml_collections
      from bert_jax.data import loader
      from bert_jax.data.prepare import prepare
      cfg = ml_collections.ConfigDict({cfg.to_dict()!r})
      prepared = prepare(cfg, verbose=False)
      batch = next(loader.make_train_iterator(cfg, prepared, 4, shard_index=0, shard_count=1))
      assert batch["input_ids"].shape == (4, 64)
      print("tensorflow" in sys.modules)
  """)
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  env = dict(os.environ, PYTHONPATH=root)
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=env, cwd=root, timeout=300, check=True)
  assert out.stdout.strip().splitlines()[-1] == "False", out.stderr[-2000:]


def test_worker_processes_give_the_same_stream(tiny):
  cfg, prepared = tiny
  make = lambda workers: loader.make_train_iterator(cfg, prepared, 8, shard_index=0,
                                                    shard_count=1, num_workers=workers)
  with_workers = make(2)
  batches = take(with_workers, 6)
  state = with_workers.get_state()
  expected = take(with_workers, 2)
  with_workers.close()
  assert_same_batches(batches, take(make(0), 6))
  resumed = make(2)
  resumed.set_state(state)  # a state saved with workers restores with workers
  assert_same_batches(take(resumed, 2), expected)
  resumed.close()


def test_eval_masks_at_eval_masked_lm_prob(tiny):
  """A run that trains at 40% masking is scored on 15% eval masks when asked; without
  eval_masked_lm_prob the eval masks follow masked_lm_prob."""
  cfg, prepared = tiny
  cfg = cfg.copy_and_resolve_references()
  cfg.update(masked_lm_prob=0.4, max_predictions_per_seq=30)
  counts = {}
  for rate in (0.0, 0.15):
    cfg.eval_masked_lm_prob = rate
    batch = next(loader.make_eval_iterator(cfg, prepared, 8, shard_index=0, shard_count=1))
    real = batch["next_sentence_weights"] > 0
    tokens = batch["input_mask"].sum(1)[real] - 3  # [CLS] A [SEP] B [SEP]
    counts[rate] = batch["masked_lm_weights"].sum(1)[real]
    expected = np.minimum(30, np.maximum(1, np.rint(tokens * (rate or 0.4))))
    np.testing.assert_array_equal(counts[rate], expected)
  assert counts[0.15].sum() < 0.5 * counts[0.0].sum()


@pytest.mark.parametrize("field,rate,message", [
    ("masked_lm_prob", 0.0, r"data.masked_lm_prob=0.0 must be in \(0, 1\]"),
    ("masked_lm_prob", 1.5, r"data.masked_lm_prob=1.5 must be in \(0, 1\]"),
    ("eval_masked_lm_prob", -0.1, r"data.eval_masked_lm_prob=-0.1 must be in \[0, 1\]"),
])
def test_a_masking_rate_outside_its_range_is_one_clear_error(tiny, field, rate, message):
  cfg, prepared = tiny
  cfg = cfg.copy_and_resolve_references()
  cfg[field] = rate
  with pytest.raises(ValueError, match=message):
    loader.make_eval_iterator(cfg, prepared, 8, shard_index=0, shard_count=1)


def test_the_pretraining_task_refuses_a_bad_masking_rate_before_preparing(tmp_path):
  from bert_jax.configs import bert_tiny  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.pretraining import PretrainingTask  # pylint: disable=g-import-not-at-top
  config = bert_tiny.get_config("demo")
  config.data.masked_lm_prob = 0.0
  with pytest.raises(ValueError, match=r"data.masked_lm_prob=0.0 must be in \(0, 1\]"):
    PretrainingTask(config)


def test_a_record_that_fails_its_checksum_is_named_with_the_fix(tiny, tmp_path):
  """Damage inside a shard that its record count cannot see (the start-up check passes):
  the read that meets it is one CorruptDataError naming the dataset and `rm -rf` of its
  level, not grain's RuntimeError traceback in the middle of training."""
  import shutil  # pylint: disable=g-import-not-at-top
  from bert_jax.data import levels  # pylint: disable=g-import-not-at-top
  from bert_jax.data.mirror import CorruptDataError  # pylint: disable=g-import-not-at-top
  _, prepared = tiny
  level = os.path.dirname(os.path.dirname(prepared.instances_dir))  # nsp-<hash>
  root = str(tmp_path / os.path.basename(level))
  shutil.copytree(level, root)
  instances_dir = os.path.join(root, os.path.relpath(prepared.instances_dir, level))
  (shard,) = [f for f in os.listdir(instances_dir) if "-train.array_record" in f]
  path = os.path.join(instances_dir, shard)
  with open(path, "r+b") as f:  # inside the first chunk: not a block header (every 64 KiB)
    f.seek(1000)  # nor the footer that counts the records
    f.write(b"\xff" * 2000)
  levels.check_shards(instances_dir, root)  # the count still matches
  with pytest.raises(CorruptDataError) as info:
    source = loader.InstanceSource(instances_dir, "train", check=False)
    source.__getitems__(range(len(source)))
  message = str(info.value)
  assert message.startswith(f"prepared data is damaged: a train record of {instances_dir} "
                            "cannot be read (") and "Corrupted" in message, message
  assert message.endswith(f"). Remove it and prepare again with the same command: rm -rf {root}")
  assert len(message.splitlines()) == 1
  with pytest.raises(CorruptDataError, match="prepared data is damaged"):  # one at a time
    for i in range(len(source)):
      source[i]  # pylint: disable=pointless-statement
