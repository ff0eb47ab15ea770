"""The instances stage as a Beam pipeline, through tfds's Beam support.

BeamInstancesBuilder writes what corpora.InstancesBuilder writes: the documents split is
cut into the same shards (corpora.shard_bounds), each shard tokenized and turned into
NSP pairs or packed rows by instances.shard_instances with its shard-keyed seeds (the
random next sentence drawn from the shard's own documents), under the same keys. So a
Beam run and an in-process run give the same records in the same order, whatever the
number of workers. Workers read their shard's documents straight from the documents
dataset (array_record random access; on gs:// from local copies, beam_remote.py). The train split's unigram counts are summed by a
CombineGlobally and saved beside the dataset; counts become Beam counters and the
build's stats.
"""
from __future__ import annotations

import io

import numpy as np

from bert_jax import paths
from bert_jax.data import beam_remote
from bert_jax.data import beam_util
from bert_jax.data import corpora
from bert_jax.data import instances

_SOURCES = {}  # (documents_dir, split) -> data source, one per worker process


def _shard(task, documents_dir: str, tokenizer_json: str, settings) -> instances.ShardInstances:
  split_id, split, s, lo, hi = task
  if (documents_dir, split) not in _SOURCES:
    _SOURCES[(documents_dir, split)] = beam_remote.open_split(documents_dir, split)
  if instances._WORKER.get("tokenizer_json") != tokenizer_json:  # pylint: disable=protected-access
    instances.init_worker(tokenizer_json, settings, threads=False)
    instances._WORKER["tokenizer_json"] = tokenizer_json  # pylint: disable=protected-access
  texts = corpora.shard_texts(_SOURCES[(documents_dir, split)], lo, hi)
  return instances.shard_instances((split_id, s, texts))


def _shards(tasks, *args):
  for task in tasks:
    yield _shard(task, *args)


def _examples(shard: instances.ShardInstances, namespace: str):
  stats = corpora.Stats(shard.stats)
  yield from corpora.shard_examples(shard, stats)
  beam_util.count(namespace, stats)


def _save_counts(counts, path: str) -> None:
  buffer = io.BytesIO()
  np.save(buffer, counts)
  paths.write_atomically(path, buffer.getvalue())


def _add(arrays) -> np.ndarray:
  total = None
  for a in arrays:
    total = a if total is None else total + a
  return total


class BeamInstancesBuilder(beam_remote.UploadingBuilder, corpora.InstancesBuilder,
                           skip_registration=True):
  """corpora.InstancesBuilder's dataset, built by a Beam pipeline."""

  def __init__(self, *, counts_path: str, **kwargs):
    """Args: counts_path: where the train split's unigram counts go (.npy); the rest as
    corpora.InstancesBuilder (`processes` is the runner's business, not used)."""
    self._counts_path = counts_path
    super().__init__(**kwargs)

  def _generate_examples(self, split_id: int, split: str):
    import apache_beam as beam  # pylint: disable=g-import-not-at-top
    n = beam_remote.num_examples(self._documents_dir, split)
    tasks = [(split_id, split, s, lo, hi)
             for s, (lo, hi) in enumerate(corpora.shard_bounds(n, self._shard_documents))]
    groups = beam_remote.by_file(self._documents_dir, split, tasks, lambda t: t[3])
    args = (self._documents_dir, self._tokenizer_json, self._settings)
    counts_path = self._counts_path if split_id == 0 else None

    @beam.ptransform_fn
    def generate(pipeline):
      shards = (pipeline
                | "Shards" >> beam.Create(groups)
                | "Spread" >> beam.Reshuffle()
                | "Instances" >> beam.FlatMap(_shards, *args))
      if counts_path:
        _ = (shards
             | "Counts" >> beam.Map(lambda shard: shard.unigram_counts)
             | "SumCounts" >> beam.CombineGlobally(_add).without_defaults()
             | "SaveCounts" >> beam.Map(_save_counts, counts_path))
      return shards | "Examples" >> beam.FlatMap(_examples, f"bert_jax.instances.{split}")
    return generate()  # pylint: disable=no-value-for-parameter

  def _process_pipeline_result(self, pipeline_result):
    for split in self._splits:
      self.stats[split] = beam_util.counters(pipeline_result, f"bert_jax.instances.{split}")
    with paths.resolve(self._counts_path).open("rb") as f:
      self.unigram_counts = np.load(f)
