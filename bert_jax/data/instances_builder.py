"""The instances level: unmasked pretraining instances of a documents level, as tfds.

`InstancesBuilder` cuts the documents split into shards (`shard_bounds`, `shard_texts`),
has worker processes tokenize each and make its instances (instances.py), and writes
them with the features both writers encode with (`instance_features`,
`shard_examples`). beam_instances.py writes the same dataset with Beam from these pieces,
and beam_vocab.py samples its vocabulary text through `shard_texts`.
"""
from __future__ import annotations

import collections
import multiprocessing

import numpy as np
import tensorflow_datasets as tfds

from bert_jax.data import documents_builder
from bert_jax.data import instances
from bert_jax.data import text_cleaning


def shard_bounds(num_documents: int, shard_documents: int) -> list[tuple[int, int]]:
  """[lo, hi) document ranges of the instance shards: about shard_documents each."""
  bounds = np.linspace(0, num_documents,
                       max(1, -(-num_documents // shard_documents)) + 1).astype(int)
  return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


def shard_texts(source, lo: int, hi: int) -> list[str]:
  """Texts of documents [lo, hi) of a documents split's data source."""
  docs = source.__getitems__(list(range(lo, hi))) if hi > lo else []
  return [d["text"].decode("utf-8") if isinstance(d["text"], bytes) else d["text"]
          for d in docs]


def _bounded_ordered_map(fn, tasks, processes: int, initializer, initargs):
  """Ordered map over a lazy task stream with at most 2 * processes shards in flight.

  Pool.imap would read the whole task stream (the corpus) ahead; this keeps memory
  bounded by a few shards. Workers are spawned, not forked: the parent may hold JAX
  and tokenizers thread pools, which do not survive a fork.
  """
  if processes <= 1:
    initializer(*initargs)
    yield from map(fn, tasks)
    return
  ctx = multiprocessing.get_context("spawn")
  with ctx.Pool(processes, initializer, initargs) as pool:
    pending = collections.deque()
    for task in tasks:
      pending.append(pool.apply_async(fn, (task,)))
      if len(pending) >= 2 * processes:
        yield pending.popleft().get()
    while pending:
      yield pending.popleft().get()


def add_counts(total: np.ndarray | None, counts: np.ndarray | None) -> np.ndarray | None:
  """Unigram counts summed over shards (None: none yet; validation shards carry none)."""
  if counts is None:
    return total
  return counts if total is None else total + counts


def shard_examples(shard: instances.ShardInstances, stats: text_cleaning.Stats):
  """(key, example) of a shard's instances; counts instances and random B's."""
  offsets = np.concatenate([[0], np.cumsum(shard.lengths)])
  for j in range(len(shard.lengths)):
    lo, hi = offsets[j], offsets[j + 1]
    stats["instances"] += 1
    stats["random_next"] += int(shard.is_random_next[j])
    yield f"{shard.shard_index}-{j}", {
        "input_ids": shard.input_ids[lo:hi],
        "segment_ids": shard.segment_ids[lo:hi],
        "is_random_next": shard.is_random_next[j],
        "num_tokens": hi - lo,
    }


def instance_features() -> tfds.features.FeaturesDict:
  """The features of an instances dataset (both paths' writers encode with them)."""
  ids = lambda: tfds.features.Tensor(shape=(None,), dtype=np.int32,
                                     encoding=tfds.features.Encoding.BYTES)
  return tfds.features.FeaturesDict({
      "input_ids": ids(),  # [n] [CLS] ... [SEP], unpadded
      "segment_ids": ids(),  # [n]
      "is_random_next": np.int32,
      "num_tokens": np.int32,
  })


class InstancesBuilder(documents_builder.LocalBuilder, skip_registration=True):
  """Unmasked pretraining instances (NSP pairs or packed rows) of a DocumentsBuilder's output.

  Documents are read in shards of `shard_documents`, each tokenized and turned into
  instances by a worker process; the NSP random document is drawn from the same shard
  (as is common practice: memory stays bounded by a few shards whatever the corpus
  size). Examples are yielded one by one to tfds' writer. Masking happens at load time.
  """

  def __init__(self, *, documents_dir: str, tokenizer_json: str,
               settings: instances.InstanceSettings, processes: int = 1,
               shard_documents: int = 256, splits=("train", "validation"), **kwargs):
    self._splits = tuple(splits)
    self._documents_dir = documents_dir
    self._tokenizer_json = tokenizer_json
    self._settings = settings
    self._processes = processes
    self._shard_documents = shard_documents
    self.stats = {}
    self.unigram_counts = None  # [vocab] int64 of the train documents, after generation
    super().__init__(**kwargs)

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=instance_features(),
                                 description="Unmasked BERT pretraining instances.")

  def _split_generators(self, dl_manager):
    del dl_manager
    return {split: self._generate_examples(int(split != "train"), split)
            for split in self._splits}

  def _generate_examples(self, split_id: int, split: str):
    source = tfds.builder_from_directory(self._documents_dir).as_data_source(split=split)
    bounds = shard_bounds(len(source), self._shard_documents)
    tasks = ((split_id, s, shard_texts(source, lo, hi)) for s, (lo, hi) in enumerate(bounds))

    stats = collections.Counter()
    counts = None
    processes = min(self._processes, len(bounds))  # no idle workers
    initargs = (self._tokenizer_json, self._settings, processes <= 1)
    for shard in _bounded_ordered_map(instances.shard_instances, tasks, processes,
                                      instances.init_worker, initargs):
      stats.update(shard.stats)
      counts = add_counts(counts, shard.unigram_counts)
      yield from shard_examples(shard, stats)
    self.stats[split] = dict(stats)
    if split_id == 0:
      self.unigram_counts = counts
