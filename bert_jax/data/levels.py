"""A prepared level on disk: its name, its record, its integrity.

Each level of a preparation (documents, vocab, instances) is a directory named by a
content hash of what it is built from (`content_hash` of `corpus_key`, the vocab's
`vocab_digest`, ...) and holds a JSON record written last, atomically (`write_json`):
the marker that it is complete. Paths inside a record are relative to the data_dir
when they lie in it (`relative`, `inside`), so the directory can move. `check_shards`
finds a damaged dataset before training reads it; `remove` clears what a crashed build
left. The stages that build levels are prepare.py; opening a finished one is
prepared_data.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import tensorflow_datasets as tfds

from bert_jax.runtime import paths
from bert_jax.data import corpora
from bert_jax.data import mirror

_FORMAT = "2"  # bump when the prepared layout changes: old dirs are then not reused


def check_shards(dataset_dir: str, root: str) -> None:
  """Every array_record shard of a prepared tfds dataset exists and holds the records
  its dataset_info.json counts; else a mirror.CorruptDataError naming the file and the fix."""
  from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
  info = tfds.builder_from_directory(dataset_dir).info
  for split in info.splits.values():
    for path, want in zip(split.filepaths, split.shard_lengths):
      path = os.fspath(path)
      if paths.is_remote(path):  # array_record does not read gs://: the copy is checked
        state = None if paths.resolve(path).exists() else "is missing"
      elif not os.path.exists(path):
        state = "is missing"
      else:
        try:
          reader = array_record_module.ArrayRecordReader(path)
          got = reader.num_records()
          reader.close()  # a cut file may open (as 0 records) and fail only here
          state = None if got == want else f"holds {got} records"
        except (RuntimeError, OSError, ValueError) as e:
          state = f"cannot be read ({type(e).__name__}: {e})"
      if state:
        raise mirror.CorruptDataError(
            f"prepared data is damaged: {path} {state}, its dataset_info.json counts "
            f"{want}. Remove it and prepare again with the same command: rm -rf {root}")


def content_hash(obj) -> str:
  """12 hex digits naming what a JSON-able object describes (a level's inputs)."""
  return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def corpus_key(cfg) -> dict:
  """What identifies a data config's corpus (the documents level's content_hash input)."""
  key = {"format": _FORMAT, "corpus": cfg.corpus, "validation_fraction": cfg.validation_fraction,
         "max_line_chars": cfg.max_line_chars}
  if cfg.corpus == "text" or (cfg.corpus == "tfds" and cfg.text_files):
    # files identified by path, size and mtime (corpus=tfds: added to the dataset)
    key["files"] = [corpora.file_identity(p) for p in corpora.expand_globs(cfg.text_files)]
  if cfg.corpus == "tfds":
    if not cfg.tfds_name:
      raise ValueError("corpus='tfds' needs config.tfds_name, e.g. 'wikipedia/20230601.en'.")
    key.update(name=cfg.tfds_name, text_key=cfg.tfds_text_key, split=cfg.tfds_split)
  return key


def vocab_digest(path: str) -> str:
  """Content hash of a vocab file, or of the tokenizer files of an HF directory (local or
  gs://, read through epath)."""
  names = ("tokenizer.json", "vocab.txt", "tokenizer_config.json")
  where = paths.resolve(path)
  files = [where / n for n in names] if where.is_dir() else [where]
  digest = hashlib.sha256()
  for name in filter(lambda f: f.exists(), files):
    digest.update(name.read_bytes())
  return digest.hexdigest()[:16]


def inside(path, directory: str) -> bool:
  """Whether path lies under directory (local paths or gs:// urls)."""
  if paths.is_remote(path) or paths.is_remote(directory):
    return str(path).startswith(str(directory).rstrip("/") + "/")
  path, directory = os.path.abspath(path), os.path.abspath(directory)
  return os.path.commonpath([path, directory]) == directory


def relative(path, directory: str) -> str:
  """path relative to directory, as a record stores it."""
  return os.path.relpath(os.fspath(path), os.fspath(directory))  # gs:// urls too


def read_json(path: str):
  """A level's record (local or gs://)."""
  return json.loads(paths.resolve(path).read_text())


def write_json(path: str, record) -> None:
  """Writes a level's record atomically: written last, it marks the level complete."""
  paths.write_atomically(path, json.dumps(record, indent=1))


def remove(root: str) -> None:
  """Removes what a crashed earlier build left (a directory, local or gs://)."""
  if paths.is_remote(root):
    paths.resolve(root).rmtree(missing_ok=True)
  else:
    shutil.rmtree(root, ignore_errors=True)


def check_data_dir(data_dir: str) -> None:
  """ValueError (one line) for a data_dir on an object store, before anything is written:
  GPT's LM streams (tasks/lm/data.py) are built and read on local disk only. (BERT's
  prepared data may live on gs://: prepare() goes through data/mirror.py.)
  """
  if paths.is_remote(data_dir):
    raise ValueError(
        f"data.data_dir {data_dir}: prepared data are built on local disk (file locks, "
        "memory-mapped array_record shards); use a local directory on each host, and "
        "data.vocab_path (local or gs://) for one shared vocabulary.")
