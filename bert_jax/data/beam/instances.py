"""The instances stage as a Beam pipeline whose workers write the dataset's files.

BeamInstancesBuilder writes the dataset instances_builder.InstancesBuilder writes (same features,
the same tfds array_record layout: the loader reads either) from the same instance
shards: the documents split cut by instances_builder.shard_bounds, each shard tokenized and turned
into NSP pairs or packed rows by instances.shard_instances with its shard-keyed seeds
(the random next sentence drawn from the shard's own documents). So both paths hold the
same records; only their order in the files differs (the loader shuffles globally).

Why not tfds's BeamWriter, as the documents stage: it serializes each example, then
materializes the serialized examples for global counts, the largest key, shard
assignment and a GroupByKey of every example by output file, to sort them by a hash of
their keys. On DirectRunner that cost ~170 us an example, half the stage (bench/
RESULTS.md, "Preparation at scale"). Here each Beam task is one output file: a run of
consecutive document shards, whose instances the worker that made them serializes and
writes (on gs:// through a local file and an upload: beam_remote.py), nothing shuffled.
The plan of files is fixed before the pipeline runs, from the documents dataset alone,
so two runs write the same files whatever the runner and the number of workers.

A combine gathers each file's record count and bytes, the stats and the train split's
unigram counts into one small summary file, from which the launcher fills the split
infos; tfds's download_and_prepare then writes dataset_info.json and renames the
incomplete directory; prepare.py writes the level's marker last.
"""
from __future__ import annotations

import collections
import io
import json

import numpy as np
import tensorflow_datasets as tfds
from etils import epath
from tensorflow_datasets.core import example_serializer

from bert_jax.runtime import paths
from bert_jax.data.beam import remote as beam_remote
from bert_jax.data.beam import util as beam_util
from bert_jax.data import instances
from bert_jax.data import instances_builder

FILE_BYTES = 64 << 20  # documents' bytes per output file (and Beam task), about
MIN_FILES = 32  # a small corpus still gets tasks enough to spread over the workers

_SOURCES = {}  # (documents_dir, split) -> data source, one per worker process
_SERIALIZER = []  # the example serializer, made once per worker process


def file_plan(documents_dir: str, split: str, shard_documents: int) -> list[list[tuple]]:
  """Per output file, its document shards as (shard index, lo, hi), consecutive.

  On an object store, the shards that start in one documents file: a worker downloads
  each file about once (beam_remote.by_file). Else about FILE_BYTES of documents a file,
  at least MIN_FILES files (at most one a shard).
  """
  info = tfds.builder_from_directory(documents_dir).info.splits[split]
  shards = [(s, lo, hi) for s, (lo, hi) in enumerate(
      instances_builder.shard_bounds(info.num_examples, shard_documents))]
  if paths.is_remote(documents_dir):
    return beam_remote.by_file(documents_dir, split, shards, lambda t: t[1])
  files = min(len(shards), max(MIN_FILES, -(-info.num_bytes // FILE_BYTES)))
  cuts = np.linspace(0, len(shards), files + 1).astype(int)
  return [shards[a:b] for a, b in zip(cuts[:-1], cuts[1:])]


def _shard(split_id: int, split: str, shard: tuple, documents_dir: str, tokenizer_json: str,
           settings) -> instances.ShardInstances:
  s, lo, hi = shard
  if (documents_dir, split) not in _SOURCES:
    _SOURCES[(documents_dir, split)] = beam_remote.open_split(documents_dir, split)
  if instances._WORKER.get("tokenizer_json") != tokenizer_json:  # pylint: disable=protected-access
    instances.init_worker(tokenizer_json, settings, threads=False)
    instances._WORKER["tokenizer_json"] = tokenizer_json  # pylint: disable=protected-access
  texts = instances_builder.shard_texts(_SOURCES[(documents_dir, split)], lo, hi)
  return instances.shard_instances((split_id, s, texts))


def _serialize(example) -> bytes:
  if not _SERIALIZER:
    features = instances_builder.instance_features()
    _SERIALIZER.append((features, example_serializer.ExampleSerializer(
        features.get_serialized_info())))
  features, serializer = _SERIALIZER[0]
  return serializer.serialize_example(features.encode_example(example))


def _write_file(task, documents_dir: str, tokenizer_json: str, settings, templates: dict,
                file_format) -> dict:
  """Makes one file's instances, writes them (atomically: a retried or duplicated task
  writes the same bytes) and returns its summary (see _merge)."""
  split_id, split, index, num_files, shards = task
  stats, counts, sizes = collections.Counter(), None, []

  def records():
    nonlocal counts
    for shard in shards:
      made = _shard(split_id, split, shard, documents_dir, tokenizer_json, settings)
      stats.update(made.stats)
      counts = instances_builder.add_counts(counts, made.unigram_counts)
      for key, example in instances_builder.shard_examples(made, stats):
        record = _serialize(example)
        sizes.append(len(record))
        yield key, record

  path = epath.Path(templates[split].sharded_filepath(shard_index=index, num_shards=num_files))
  with tfds.core.utils.incomplete_files(path) as tmp:
    beam_remote.UploadingExampleWriter(file_format=file_format).write(tmp, records())
  beam_util.count(f"bert_jax.instances.{split}", stats)
  return {"files": [(split, index, len(sizes), sum(sizes))],
          "stats": {split: dict(stats)}, "counts": counts}


def _merge(summaries) -> dict:
  """Sums summaries: the files listed, the stats and unigram counts added (a CombineFn
  in function form: associative, so the runner may merge in any grouping)."""
  out = {"files": [], "stats": {}, "counts": None}
  for s in summaries:
    out["files"] += s["files"]
    for split, stats in s["stats"].items():
      total = collections.Counter(out["stats"].get(split, {}))
      total.update(stats)  # not `+`: it drops keys counted 0, which the stats keep
      out["stats"][split] = dict(total)
    out["counts"] = instances_builder.add_counts(out["counts"], s["counts"])
  return out


def _save(summary: dict, path: str) -> None:
  buffer = io.BytesIO()
  meta = json.dumps({"files": summary["files"], "stats": summary["stats"]})
  np.savez(buffer, counts=summary["counts"], meta=np.array(meta))
  paths.write_atomically(path, buffer.getvalue())


class BeamInstancesBuilder(instances_builder.InstancesBuilder, skip_registration=True):
  """instances_builder.InstancesBuilder's dataset, built by a Beam pipeline."""

  def __init__(self, *, summary_path: str, **kwargs):
    """Args: summary_path: where the pipeline leaves its summary (.npz; any place the
    workers and this process both reach); the rest as instances_builder.InstancesBuilder
    (`processes` is the runner's business, not used)."""
    self._summary_path = summary_path
    super().__init__(**kwargs)

  def _download_and_prepare(self, dl_manager, download_config):
    """Runs the pipeline into self.data_path (tfds's incomplete directory, renamed by
    download_and_prepare once dataset_info.json is written) and sets the split infos."""
    del dl_manager  # nothing downloaded
    import apache_beam as beam  # pylint: disable=g-import-not-at-top
    tasks, templates = [], {}
    for split in self._splits:
      plan = file_plan(self._documents_dir, split, self._shard_documents)
      tasks += [(int(split != "train"), split, f, len(plan), shards)
                for f, shards in enumerate(plan)]
      templates[split] = self._get_filename_template(split_name=split)
    args = (self._documents_dir, self._tokenizer_json, self._settings, templates,
            self.info.file_format)
    with beam.Pipeline(runner=download_config.beam_runner,
                       options=download_config.beam_options) as pipeline:
      _ = (pipeline
           | "Files" >> beam.Create(tasks)
           | "Spread" >> beam.Reshuffle()
           | "Write" >> beam.Map(_write_file, *args)
           | "Summary" >> beam.CombineGlobally(_merge)
           | "Save" >> beam.Map(_save, self._summary_path))
    with paths.resolve(self._summary_path).open("rb") as f:
      saved = np.load(f)
      meta, self.unigram_counts = json.loads(str(saved["meta"])), saved["counts"]
    self.stats = meta["stats"]
    infos = []
    for split in self._splits:
      files = sorted((f, n, size) for s, f, n, size in meta["files"] if s == split)
      if not sum(n for _, n, _ in files):  # prepare._build drops the split and retries
        raise ValueError(f"The total number of generated examples is 0 for split {split}.")
      infos.append(tfds.core.SplitInfo(
          name=split, shard_lengths=[n for _, n, _ in files],
          num_bytes=sum(size for *_, size in files), filename_template=templates[split]))
    self.info.set_splits(tfds.core.SplitDict(infos))
