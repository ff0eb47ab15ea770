"""A finished preparation: what training reads (`PreparedData`), opened and summarized.

`open_prepared` turns an instances level that prepare.py finished (its prepared.json
written last) into a `PreparedData`: local paths (copied from a gs:// data_dir first:
data/mirror.py), the vocabulary's special ids and size, the unigram counts, the record
counts. It never builds: it is also what the other hosts of a pod call on the directory
process 0 named (data/hosts.py). `summary` is the report a run prints.
"""
from __future__ import annotations

import dataclasses
import io
import os
from typing import Optional

import numpy as np

from bert_jax.runtime import paths
from bert_jax.data import levels
from bert_jax.data import mirror
from bert_jax.data import tokenizer as tokenizer_lib


@dataclasses.dataclass(frozen=True)
class PreparedData:
  """What `prepare` built; everything the iterators need."""
  instances_dir: str  # the tfds dataset dir (…/<name>/<version>)
  documents_dir: str
  vocab_path: str
  lowercase: Optional[bool]  # None: the given tokenizer's own normalization
  special: tokenizer_lib.SpecialIds
  vocab_size: int
  unigram_counts: np.ndarray  # [vocab_size] int64 over the train documents
  num_examples: dict  # split -> number of instances
  stats: dict  # corpus, instance and timing counts (also in prepared.json)

  def tokenizer(self):
    return tokenizer_lib.load_tokenizer(self.vocab_path, lowercase=self.lowercase)


def store_of(cfg) -> mirror.Mirror:
  """Where a data config's levels live: data_dir, mirrored on local disk if on gs://."""
  return mirror.Mirror(cfg.data_dir, cfg.get("cache_dir") or "~/bert_jax_cache")


def lowercase_of(cfg):
  """The tokenizer's lowercasing for a data config (None: the given vocab's own)."""
  # A trained vocab is uncased unless lowercase=False; a given one keeps its own casing
  # unless lowercase says otherwise.
  return cfg.lowercase if cfg.vocab_path else cfg.lowercase is not False


def _in_data_dir(data_dir: str, path: str) -> str:
  """A path prepared.json recorded: relative to data_dir, or as given (absolute, gs://)."""
  return path if paths.is_remote(path) else os.path.join(data_dir, path)


def open_prepared(cfg, name: str, verbose: bool = True, copy: bool = True) -> PreparedData:
  """The instances directory `name` (and its vocabulary) that a prepare() of this config
  finished, copied to local disk first when data_dir is on gs:// (unless `copy` is False:
  then its paths are the bucket's, for a summary; training reads local copies); never
  builds.

  Raises:
    FileNotFoundError: `name` is not complete under data_dir (not shared with the host
      that prepared it, or not prepared).
    mirror.CorruptDataError: a shard does not hold the records its build recorded.
  """
  store = store_of(cfg)
  copy = copy or not store.remote
  base = store.local if copy else store.remote
  root = store.fetch(name, "prepared.json") if copy else store.where(name)
  record = levels.read_json(os.path.join(root, "prepared.json"))
  vocab_path = _in_data_dir(base, record["vocab_path"])
  if copy and not os.path.isabs(record["vocab_path"]) and not paths.is_remote(vocab_path):
    level, file = os.path.split(record["vocab_path"])  # one we trained: vocab-<hash>/
    vocab_path = os.path.join(store.fetch(level, file), file)
  instances_dir = os.path.join(base, record["instances_dir"])
  levels.check_shards(instances_dir, root)
  documents_dir = os.path.join(base, record["documents_dir"])
  if store.remote and not paths.resolve(documents_dir).is_dir():  # not copied: not read
    documents_dir = f"{store.remote}/{record['documents_dir']}"
  lowercase = lowercase_of(cfg)
  tok = tokenizer_lib.load_tokenizer(vocab_path, lowercase)
  prepared = PreparedData(
      instances_dir=instances_dir, documents_dir=documents_dir, vocab_path=vocab_path,
      lowercase=lowercase, special=tokenizer_lib.SpecialIds.from_tokenizer(tok, vocab_path),
      vocab_size=tok.get_vocab_size(with_added_tokens=True),
      unigram_counts=np.load(io.BytesIO(
          paths.resolve(os.path.join(root, "unigram_counts.npy")).read_bytes())),
      num_examples={s: record["stats"]["instances"].get(s, {}).get("instances", 0)
                    for s in ("train", "validation")},
      stats=record["stats"])
  if verbose:
    print(summary(prepared, store.where(name)))
  return prepared


def summary(prepared: PreparedData, root: str = "") -> str:
  c, inst = prepared.stats["corpus"], prepared.stats["instances"]
  train = inst.get("train", {})
  rn = train.get("random_next", 0) / max(train.get("instances", 1), 1)
  return "\n".join([
      f"[bert_jax.data] prepared {root}",
      f"  corpus: {c.get('documents', 0)} documents ({c.get('train_documents', 0)} train / "
      f"{c.get('validation_documents', 0)} validation), {c.get('sentences', 0)} sentences, "
      f"{c.get('one_sentence_documents', 0)} one-sentence documents",
      f"  bad input: {c.get('empty_documents', 0)} empty documents skipped, "
      f"{c.get('empty_files', 0)} empty files, {c.get('non_utf8_lines', 0)} non-UTF-8 lines "
      f"(replaced), {c.get('truncated_lines', 0)} over-long lines truncated, "
      f"{c.get('skipped_pages', 0)} wiki redirects/empty pages, "
      f"{train.get('documents_empty_after_tokenization', 0)} documents empty once tokenized",
      f"  vocab: {prepared.vocab_path} ({prepared.vocab_size} tokens)",
      f"  instances: {prepared.num_examples} ({train.get('tokens', 0)} train tokens), "
      f"random next {100 * rn:.1f}%",
      f"  rate: {prepared.stats['documents_per_second']:.0f} documents/s, "
      f"{prepared.stats['tokens_per_second']:.0f} tokens/s (tokenize + instances)",
  ])
