"""Beam workers that share no disk (Dataflow, or any runner with a gs:// data_dir).

A stage run with data_dir on an object store writes every level straight into the
bucket: the workers write the array_record shards, the launcher only the small files
(tfds's dataset_info.json, the level's counts and marker, written last), so nothing
the size of the data passes through the launcher's disk and no worker needs a mount.

Why this shape (tfds 4.9 as installed): our builders are tfds Beam builders, and tfds's
BeamWriter already does everything but the byte writing on the workers. Its
`_write_final_shard` hands each shard's sorted examples to the builder's ExampleWriter
(`DatasetBuilder._example_writer`, the hook tfds documents for "a custom storage")
with a path under the dataset's incomplete directory, renames it into place and writes
the split's shard lengths through epath; the launcher then writes dataset_info.json
and renames the incomplete directory (epath: gcsfs on gs://). Only the ExampleWriter
cannot work on gs://: array_record's C++ writer writes local files only. So
UploadingExampleWriter writes the shard to a local temporary file on the worker and
uploads it, checked against the object's CRC32C; everything else stays tfds's code.
The documents stage goes through BeamWriter so (its records in the in-process order);
the instances stage writes its files itself, one per Beam task, with the same
UploadingExampleWriter (beam_instances.py: BeamWriter's global shuffle cost half that
stage). Building on the launcher and uploading (today's mirror) was no alternative: a
cluster's workers cannot take part in it.

Reading is the mirror image: array_record cannot read gs:// either, and the vocabulary
and instances stages read the documents dataset by random access. RemoteSplit
downloads the array_record files a worker needs (checked) into its temporary
directory, keeps the last two, and reads records from them as tfds's data source does;
the stages hand a worker all tasks of one documents file at once (`by_file`), so each
file is downloaded about once, not once per task.
"""
from __future__ import annotations

import atexit
import bisect
import collections
import os
import shutil
import tempfile

import tensorflow_datasets as tfds
from tensorflow_datasets.core import writer as tfds_writer

from bert_jax.runtime import paths
from bert_jax.data import mirror


def _fs(url: str):
  import fsspec  # pylint: disable=g-import-not-at-top
  return fsspec.core.url_to_fs(url)


def upload(local: str, url: str) -> None:
  """Copies a local file to an object, checked against the object's CRC32C/MD5."""
  fs, path = _fs(url)
  fs.put_file(local, path)
  fs.invalidate_cache(path)
  bad = mirror.mismatch(local, fs.info(path))
  if bad:
    raise mirror.CorruptDataError(f"uploading {local} to {url}: the object has {bad}.")


def download(url: str, local: str) -> None:
  """Copies an object to a local file, checked against its CRC32C/MD5."""
  fs, path = _fs(url)
  fs.get_file(path, local)
  bad = mirror.mismatch(local, fs.info(path))
  if bad:
    os.remove(local)
    raise mirror.CorruptDataError(f"the copy of {url} has {bad}: the transfer or the "
                                  "object is damaged; run again.")


class UploadingExampleWriter(tfds_writer.ExampleWriter):
  """tfds's ExampleWriter; a shard for an object store goes through a local file."""

  def write(self, path, examples):
    if not paths.is_remote(path):
      return super().write(path, examples)
    with tempfile.TemporaryDirectory(prefix="bert_jax_shard_") as tmp:
      local = os.path.join(tmp, os.path.basename(os.fspath(path)))
      positions = super().write(local, examples)
      upload(local, os.fspath(path))
    return positions


def _starts(info, split: str) -> list[int]:
  """Index of each file's first record, and the split's length last."""
  starts = [0]
  for n in info.splits[split].shard_lengths:
    starts.append(starts[-1] + n)
  return starts


class UploadingBuilder:
  """Mixin of our Beam builders: their shards go through UploadingExampleWriter."""

  def _example_writer(self):
    return UploadingExampleWriter(file_format=self.info.file_format)


class RemoteSplit:
  """A split of a tfds array_record dataset on an object store, indexable like tfds's
  data source (`len`, `[i]`, `__getitems__`), read from local copies of its files."""

  def __init__(self, dataset_dir: str, split: str, keep: int = 2):
    info = tfds.builder_from_directory(dataset_dir).info
    self._features = info.features
    self._urls = [os.fspath(p) for p in info.splits[split].filepaths]
    self._starts = _starts(info, split)
    self._keep = keep
    self._open = collections.OrderedDict()  # file index -> (reader, local dir), LRU
    atexit.register(self.close)  # the worker's temporary copies go with it

  def __len__(self) -> int:
    return self._starts[-1]

  def file_of(self, index: int) -> int:
    """Which of the split's files holds record `index`."""
    return bisect.bisect_right(self._starts, index) - 1

  def _reader(self, f: int):
    from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
    if f in self._open:
      self._open.move_to_end(f)
      return self._open[f][0]
    while len(self._open) >= self._keep:  # bound the worker's disk: drop the oldest
      reader, folder = self._open.popitem(last=False)[1]
      reader.close()
      shutil.rmtree(folder, ignore_errors=True)
    folder = tempfile.mkdtemp(prefix="bert_jax_records_")
    local = os.path.join(folder, os.path.basename(self._urls[f]))
    download(self._urls[f], local)
    reader = array_record_module.ArrayRecordReader(local)
    self._open[f] = (reader, folder)
    return reader

  def __getitems__(self, indices):
    out = [None] * len(indices)
    by_file = collections.defaultdict(list)
    for i, index in enumerate(indices):
      by_file[self.file_of(index)].append((i, index))
    for f, wanted in sorted(by_file.items()):
      records = self._reader(f).read([index - self._starts[f] for _, index in wanted])
      for (i, _), record in zip(wanted, records):
        out[i] = self._features.deserialize_example_np(record)
    return out

  def __getitem__(self, index: int):
    return self.__getitems__([index])[0]

  def close(self) -> None:
    while self._open:
      reader, folder = self._open.popitem()[1]
      reader.close()
      shutil.rmtree(folder, ignore_errors=True)


_OPEN = {}  # (dataset_dir, split) -> RemoteSplit: one per worker process, files reused


def open_split(dataset_dir: str, split: str):
  """tfds's data source of a split: local, or a RemoteSplit on an object store (split
  names only: no slices there)."""
  if paths.is_remote(dataset_dir):
    if (dataset_dir, split) not in _OPEN:
      _OPEN[(dataset_dir, split)] = RemoteSplit(dataset_dir, split)
    return _OPEN[(dataset_dir, split)]
  return tfds.builder_from_directory(dataset_dir).as_data_source(split=split)


def num_examples(dataset_dir: str, split: str) -> int:
  """Records of a split, from dataset_info.json (no file opened: local or gs://)."""
  return tfds.builder_from_directory(dataset_dir).info.splits[split].num_examples


def by_file(dataset_dir: str, split: str, tasks: list, first) -> list[list]:
  """Tasks in groups that one worker runs: one group per task locally (the runner spreads
  them); on an object store, the tasks whose first record (`first(task)`) is in the same
  file, so a worker downloads each file about once."""
  if not paths.is_remote(dataset_dir):
    return [[t] for t in tasks]
  starts = _starts(tfds.builder_from_directory(dataset_dir).info, split)
  groups = collections.defaultdict(list)
  for t in tasks:
    groups[bisect.bisect_right(starts, first(t)) - 1].append(t)
  return [groups[f] for f in sorted(groups)]
