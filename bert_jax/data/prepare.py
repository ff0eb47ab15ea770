"""Prepare once: corpus -> documents -> vocab -> instances, cached by config hash.

  prepared = prepare(config.data)   # idempotent; prints summary(prepared)

Layout under data_dir: documents-<hash>/ (tfds), vocab-<hash>/vocab.txt (if trained),
<mode>-<hash>/ (tfds instances + unigram_counts.npy + prepared.json, written last).
Every level is built under a file lock next to its directory (`<dir>.lock`), so runs
preparing the same data_dir at once (two hosts on a shared filesystem, two jobs on one
machine) build it once: the others wait and reuse it. Reused datasets have their shards
checked against the record counts tfds wrote (a truncated array_record opens as empty).
Loading is data/loader.py.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from typing import Optional

import numpy as np
import tensorflow_datasets as tfds

from bert_jax import paths
from bert_jax.data import corpora
from bert_jax.data import instances
from bert_jax.data import tokenizer as tokenizer_lib

_FORMAT = "1"  # bump when the prepared layout changes: old dirs are then not reused


class CorruptDataError(ValueError):
  """A prepared dataset's files do not match what its build recorded."""


@contextlib.contextmanager
def build_lock(root: str):
  """Holds an exclusive lock for building `root` (fcntl on `<root>.lock`, a sibling that
  survives the rmtree of a crashed build). A second process preparing the same directory
  blocks here, then finds the finished build and reuses it, instead of deleting it
  half-way."""
  os.makedirs(os.path.dirname(os.path.abspath(root)), exist_ok=True)
  with open(root + ".lock", "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def check_shards(dataset_dir: str, root: str) -> None:
  """Every array_record shard of a prepared tfds dataset exists and holds the records
  its dataset_info.json counts; else a CorruptDataError naming the file and the fix."""
  from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
  info = tfds.builder_from_directory(dataset_dir).info
  for split in info.splits.values():
    for path, want in zip(split.filepaths, split.shard_lengths):
      path = os.fspath(path)
      if not os.path.exists(path):
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
        raise CorruptDataError(
            f"prepared data is damaged: {path} {state}, its dataset_info.json counts "
            f"{want}. Remove it and prepare again with the same command: rm -rf {root}")


def content_hash(obj) -> str:
  return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def _inside(path, directory: str) -> bool:
  if paths.is_remote(path):  # a gs:// vocab_path is never under the local data_dir
    return False
  path, directory = os.path.abspath(path), os.path.abspath(directory)
  return os.path.commonpath([path, directory]) == directory


def _vocab_digest(path: str) -> str:
  """Content hash of a vocab file, or of the tokenizer files of an HF directory (local or
  gs://, read through epath)."""
  names = ("tokenizer.json", "vocab.txt", "tokenizer_config.json")
  where = paths.resolve(path)
  files = [where / n for n in names] if where.is_dir() else [where]
  digest = hashlib.sha256()
  for name in filter(lambda f: f.exists(), files):
    digest.update(name.read_bytes())
  return digest.hexdigest()[:16]


def _in_data_dir(data_dir: str, path: str) -> str:
  """A path prepared.json recorded: relative to data_dir, or as given (absolute, gs://)."""
  return path if paths.is_remote(path) else os.path.join(data_dir, path)


def check_data_dir(data_dir: str) -> None:
  """ValueError (one line) for a data_dir on an object store, before anything is written.

  Prepared data stay on each host's local disk: builds are serialized with fcntl locks
  on a POSIX filesystem, and tfds writes array_record shards that grain memory-maps.
  The inputs may be remote: data.vocab_path (local or gs://) gives every host the same
  vocabulary, as its own training might not (tokenizers' WordPiece trainer is not
  deterministic).
  """
  if paths.is_remote(data_dir):
    raise ValueError(
        f"data.data_dir {data_dir}: prepared data are built on local disk (file locks, "
        "memory-mapped array_record shards); use a local directory on each host, and "
        "data.vocab_path (local or gs://) for one shared vocabulary.")


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


# ------------------------------------------------------------------------- prepare
def _check_config(cfg) -> None:
  for field, allowed in (("corpus", ("embedded", "text", "tfds")), ("mode", ("nsp", "mlm_packed")),
                         ("random_token", ("unigram", "uniform"))):
    if cfg[field] not in allowed:
      raise ValueError(f"data config {field}={cfg[field]!r}; expected one of {allowed}.")
  if cfg.max_seq_length < 8:
    raise ValueError(f"max_seq_length={cfg.max_seq_length} is too short for BERT instances.")


def corpus_key(cfg) -> dict:
  key = {"format": _FORMAT, "corpus": cfg.corpus, "validation_fraction": cfg.validation_fraction,
         "max_line_chars": cfg.max_line_chars}
  if cfg.corpus == "text":  # files identified by path, size and mtime
    key["files"] = [(p, os.path.getsize(p), os.path.getmtime(p))
                    for p in corpora.expand_globs(cfg.text_files)]
  elif cfg.corpus == "tfds":
    if not cfg.tfds_name:
      raise ValueError("corpus='tfds' needs config.tfds_name, e.g. 'wikipedia/20230601.en'.")
    key.update(name=cfg.tfds_name, text_key=cfg.tfds_text_key, split=cfg.tfds_split)
  return key


def _documents_fn(cfg):
  if cfg.corpus == "text":
    return lambda stats: corpora.text_file_documents(cfg.text_files, stats, cfg.max_line_chars)
  if cfg.corpus == "tfds":
    return lambda stats: corpora.tfds_documents(
        cfg.tfds_name, stats, cfg.tfds_text_key, cfg.tfds_split, cfg.tfds_data_dir,
        cfg.max_line_chars)
  return lambda stats: corpora.embedded_documents(stats, cfg.max_line_chars)


def _build(make_builder, root: str, splits):
  """Builds a tfds dataset; a split that turns out empty is dropped and the build retried.

  tfds refuses to write a split without examples, and whether the validation split of
  a small corpus gets a document is known only once the corpus has been read.
  """
  splits = list(splits)
  while True:
    builder = make_builder(tuple(splits))
    try:
      builder.download_and_prepare(download_dir=os.path.join(root, "downloads"),
                                   file_format="array_record")
      return builder
    except AssertionError as e:
      empty = re.search(r'split "(\w+)": No examples were yielded', str(e))
      if not empty or empty.group(1) not in splits:
        raise
      if empty.group(1) == "train":
        return None
      splits.remove(empty.group(1))
      for stale in builder.data_path.parent.glob("incomplete.*"):
        shutil.rmtree(stale, ignore_errors=True)


def prepare_documents(cfg, root: str) -> tuple[str, dict, float]:
  with build_lock(root):
    return _prepare_documents(cfg, root)


def _prepare_documents(cfg, root: str) -> tuple[str, dict, float]:
  stats_path = os.path.join(root, "corpus_stats.json")
  if os.path.exists(stats_path):
    with open(stats_path) as f:
      saved = json.load(f)
    check_shards(os.path.join(root, saved["dataset_dir"]), root)
    return os.path.join(root, saved["dataset_dir"]), saved["stats"], 0.0
  shutil.rmtree(root, ignore_errors=True)  # a crashed earlier attempt
  start = time.time()
  stats = corpora.Stats()

  def make_builder(splits):
    os.makedirs(root, exist_ok=True)
    builder = corpora.DocumentsBuilder(documents_fn=_documents_fn(cfg),
                                       validation_fraction=cfg.validation_fraction,
                                       splits=splits, spill_dir=root, data_dir=root,
                                       file_format="array_record")
    builder.stats = stats  # filled by each pass, kept if the build fails
    return builder

  splits = ("train", "validation") if cfg.validation_fraction > 0 else ("train",)
  builder = _build(make_builder, root, splits)
  stats = dict(stats)
  if builder is None:
    shutil.rmtree(root, ignore_errors=True)
    where = {"text": cfg.text_files, "tfds": cfg.tfds_name}.get(cfg.corpus, "embedded")
    raise ValueError(f"The corpus ({cfg.corpus}: {where}) has no non-empty training "
                     f"document; counts: {stats}.")
  with open(stats_path + ".tmp", "w") as f:  # written last, atomically: "this build is done"
    json.dump({"dataset_dir": os.path.relpath(builder.data_path, root), "stats": stats}, f,
              indent=1)
  os.replace(stats_path + ".tmp", stats_path)
  return os.fspath(builder.data_path), stats, time.time() - start


def _prepare_vocab(cfg, data_dir: str, corpus_hash: str, documents_dir: str) -> str:
  if cfg.vocab_path:
    tokenizer_lib.load_tokenizer(cfg.vocab_path, cfg.lowercase)  # fail early: missing specials
    return os.path.expanduser(cfg.vocab_path)  # local or gs://: read through epath
  path = os.path.join(data_dir, "vocab-" + content_hash([corpus_hash, cfg.vocab_size, cfg.lowercase]),
                      "vocab.txt")
  with build_lock(os.path.dirname(path)):
    if not os.path.exists(path):  # save_vocab writes it atomically
      from bert_jax import progress  # pylint: disable=g-import-not-at-top
      source = tfds.builder_from_directory(documents_dir).as_data_source(split="train")
      texts = (d["text"].decode("utf-8") for d in progress.bar(
          source, total=len(source), desc="vocab: documents", unit="doc"))
      tok = tokenizer_lib.train_wordpiece(texts, cfg.vocab_size, cfg.lowercase is not False)
      tokenizer_lib.save_vocab(tok, path)
  return path


def _prepare_instances(cfg, data_dir: str, root: str, documents_dir: str, vocab_path: str,
                       tok, settings, corpus_stats: dict, t_docs: float,
                       t_vocab: float) -> None:
  """Builds the instances dataset in `root` unless its prepared.json (written last) exists."""
  done = os.path.join(root, "prepared.json")
  if os.path.exists(done):
    return
  shutil.rmtree(root, ignore_errors=True)
  start = time.time()
  # Auto: worker processes only for corpora of many shards; spawning one costs a few
  # seconds of imports, more than the embedded corpus takes in-process.
  shards = corpus_stats.get("documents", 0) / cfg.shard_documents
  processes = cfg.prepare_processes or max(1, min(os.cpu_count() or 1, int(shards // 4)))
  make_builder = lambda splits: corpora.InstancesBuilder(
      documents_dir=documents_dir, tokenizer_json=tok.to_str(), settings=settings,
      processes=processes, shard_documents=cfg.shard_documents, splits=splits,
      data_dir=root, file_format="array_record")
  splits = list(tfds.builder_from_directory(documents_dir).info.splits)
  builder = _build(make_builder, root, splits)
  if builder is None:
    raise ValueError(f"No training instance: every train document of {documents_dir} is "
                     "empty once tokenized.")
  seconds = time.time() - start
  np.save(os.path.join(root, "unigram_counts.npy"), builder.unigram_counts)
  documents = sum(s.get("documents", 0) for s in builder.stats.values())
  tokens = sum(s.get("tokens", 0) for s in builder.stats.values())
  # Paths inside data_dir are stored relative to it: the directory can move.
  rel = lambda p: os.path.relpath(p, data_dir) if _inside(p, data_dir) else p
  record = {
      "instances_dir": rel(builder.data_path), "documents_dir": rel(documents_dir),
      "vocab_path": rel(vocab_path), "config": cfg.to_dict(),
      "stats": {"corpus": corpus_stats, "instances": builder.stats,
                "seconds": {"documents": t_docs, "vocab": t_vocab, "instances": seconds},
                "documents_per_second": documents / max(seconds, 1e-9),
                "tokens_per_second": tokens / max(seconds, 1e-9)}}
  with open(done + ".tmp", "w") as f:
    json.dump(record, f, indent=1)
  os.replace(done + ".tmp", done)


def prepare(cfg, verbose: bool = True) -> PreparedData:
  """Builds (or reuses) documents, vocab and instances for a data config; prints a summary.

  Raises:
    FileNotFoundError: a corpus glob matches nothing / the vocab path does not exist.
    ValueError: an empty corpus, a vocab without the special tokens, a bad config value.
  """
  _check_config(cfg)
  check_data_dir(cfg.data_dir)
  data_dir = os.path.expanduser(cfg.data_dir)
  corpus_hash = content_hash(corpus_key(cfg))
  documents_dir, corpus_stats, t_docs = prepare_documents(
      cfg, os.path.join(data_dir, "documents-" + corpus_hash))
  start = time.time()
  vocab_path = _prepare_vocab(cfg, data_dir, corpus_hash, documents_dir)
  t_vocab = time.time() - start
  # A trained vocab is uncased unless lowercase=False; a given one keeps its own casing
  # unless lowercase says otherwise.
  lowercase = cfg.lowercase if cfg.vocab_path else cfg.lowercase is not False
  tok = tokenizer_lib.load_tokenizer(vocab_path, lowercase)
  settings = instances.InstanceSettings(
      mode=cfg.mode, max_seq_length=cfg.max_seq_length, short_seq_prob=cfg.short_seq_prob,
      dupe_factor=cfg.dupe_factor, pack_across_documents=cfg.pack_across_documents,
      seed=cfg.seed)
  root = os.path.join(data_dir, f"{cfg.mode}-" + content_hash(
      [corpus_hash, _vocab_digest(vocab_path), lowercase, cfg.shard_documents,
       dataclasses.asdict(settings)]))
  done = os.path.join(root, "prepared.json")
  with build_lock(root):
    _prepare_instances(cfg, data_dir, root, documents_dir, vocab_path, tok, settings,
                       corpus_stats, t_docs, t_vocab)
  with open(done) as f:
    record = json.load(f)
  check_shards(os.path.join(data_dir, record["instances_dir"]), root)
  prepared = PreparedData(
      instances_dir=os.path.join(data_dir, record["instances_dir"]),
      documents_dir=os.path.join(data_dir, record["documents_dir"]),
      vocab_path=_in_data_dir(data_dir, record["vocab_path"]), lowercase=lowercase,
      special=tokenizer_lib.SpecialIds.from_tokenizer(tok, vocab_path),
      vocab_size=tok.get_vocab_size(with_added_tokens=True),
      unigram_counts=np.load(os.path.join(root, "unigram_counts.npy")),
      num_examples={s: record["stats"]["instances"].get(s, {}).get("instances", 0)
                    for s in ("train", "validation")},
      stats=record["stats"])
  if verbose:
    print(summary(prepared, root))
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
