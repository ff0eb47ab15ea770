"""Prepare once: corpus -> documents -> vocab -> instances, cached by config hash.

  prepared = prepare(config.data)   # idempotent; prints summary(prepared)

Layout under data_dir: documents-<hash>/ (tfds), vocab-<hash>/vocab.txt (if trained),
<mode>-<hash>/ (tfds instances + unigram_counts.npy + prepared.json, written last).
Every level is built under a file lock next to its directory (`<dir>.lock`), so runs
preparing the same data_dir at once (two jobs on one machine or a shared filesystem)
build it once: the others wait and reuse it. A data_dir on gs:// is built on local disk
(data.cache_dir) and uploaded level by level, marker last; a run that finds a level
complete in the bucket copies it instead (data/mirror.py): what training reads comes
from local disk. With a Beam runner and a gs:// data_dir the levels are written
straight into the bucket instead, shards by the workers (data/beam/remote.py), and
the launcher copies nothing. On a pod only process 0 prepares; the others `open_prepared` the
directory it names (data/hosts.py). Reused datasets have their shards checked against
the record counts tfds wrote (a truncated array_record opens as empty).
With a Beam runner (`prepare(cfg, beam=beam_util.BeamRun(...))`, or the command
`python -m bert_jax.prepare --config ... --beam_runner ...`) the three stages run as
Beam pipelines (beam_documents.py, beam_vocab.py, beam_instances.py) that write the same
datasets into the same directories: training reuses them as if built in process.

This module is the stages and their order. A level's name, record and shard check are
levels.py; opening a finished preparation (`open_prepared`, `PreparedData`, `summary`)
is prepared_data.py; the tfds builders of the levels are documents_builder.py and
instances_builder.py. Loading is data/loader.py.
"""
from __future__ import annotations

import dataclasses
import functools
import io
import os
import re
import time

import numpy as np
import tensorflow_datasets as tfds

from bert_jax.runtime import paths
from bert_jax.data.beam import documents as beam_documents
from bert_jax.data.beam import instances as beam_instances
from bert_jax.data.beam import vocab as beam_vocab
from bert_jax.data import corpora
from bert_jax.data import documents_builder
from bert_jax.data import instances
from bert_jax.data import instances_builder
from bert_jax.data import levels
from bert_jax.data import mirror
from bert_jax.data import prepared_data
from bert_jax.data import text_cleaning
from bert_jax.data import tokenizer as tokenizer_lib
from bert_jax.data import wordpiece


def _check_config(cfg) -> None:
  for field, allowed in (("corpus", ("embedded", "text", "tfds")), ("mode", ("nsp", "mlm_packed")),
                         ("random_token", ("unigram", "uniform"))):
    if cfg[field] not in allowed:
      raise ValueError(f"data config {field}={cfg[field]!r}; expected one of {allowed}.")
  if cfg.max_seq_length < 8:
    raise ValueError(f"max_seq_length={cfg.max_seq_length} is too short for BERT instances.")


def _build(make_builder, root: str, splits, beam=None):
  """Builds a tfds dataset; a split that turns out empty is dropped and the build retried.

  tfds refuses to write a split without examples, and whether the validation split of
  a small corpus gets a document is known only once the corpus has been read.
  """
  splits = list(splits)
  while True:
    builder = make_builder(tuple(splits))
    try:
      builder.download_and_prepare(
          download_dir=os.path.join(root, "downloads"), file_format="array_record",
          download_config=beam.download_config() if beam else None)
      return builder
    except (AssertionError, ValueError, RuntimeError) as e:  # in process / on Beam
      empty = re.search(r'split "(\w+)": No examples were yielded|generated examples is 0 '
                        r'for split (\w+)', str(e))
      split = empty and (empty.group(1) or empty.group(2))
      if split not in splits:
        raise
      if split == "train":
        return None
      splits.remove(split)
      for stale in builder.data_path.parent.glob("incomplete.*"):
        levels.remove(os.fspath(stale))


def prepare_documents(cfg, root: str, beam=None) -> tuple[str, dict, float]:
  with mirror.build_lock(root):
    return _prepare_documents(cfg, root, beam)


def _prepare_documents(cfg, root: str, beam) -> tuple[str, dict, float]:
  stats_path = os.path.join(root, "corpus_stats.json")
  if paths.resolve(stats_path).exists():
    saved = levels.read_json(stats_path)
    levels.check_shards(os.path.join(root, saved["dataset_dir"]), root)
    return os.path.join(root, saved["dataset_dir"]), saved["stats"], 0.0
  levels.remove(root)  # a crashed earlier attempt
  start = time.time()
  stats = text_cleaning.Stats()

  sources = corpora.sources(cfg, beam.download_config() if beam else None)

  def make_builder(splits):
    paths.resolve(root).mkdir(parents=True, exist_ok=True)
    common = dict(validation_fraction=cfg.validation_fraction, splits=splits, data_dir=root,
                  file_format="array_record")
    if beam:
      builder = beam_documents.BeamDocumentsBuilder(sources=sources, **common)
    else:
      builder = documents_builder.DocumentsBuilder(
          documents_fn=lambda stats: corpora.keyed_documents(sources, stats), spill_dir=root,
          **common)
    builder.stats = stats  # filled by each pass, kept if the build fails
    return builder

  splits = ("train", "validation") if cfg.validation_fraction > 0 else ("train",)
  builder = _build(make_builder, root, splits, beam)
  stats = dict(stats)
  if builder is None:
    levels.remove(root)
    where = {"text": cfg.text_files, "tfds": cfg.tfds_name}.get(cfg.corpus, "embedded")
    raise ValueError(f"The corpus ({cfg.corpus}: {where}) has no non-empty training "
                     f"document; counts: {stats}.")
  # Written last, atomically: "this build is done".
  levels.write_json(stats_path, {"dataset_dir": levels.relative(builder.data_path, root),
                                 "stats": stats})
  return os.fspath(builder.data_path), stats, time.time() - start


def _prepare_vocab(cfg, store: mirror.Mirror, corpus_hash: str, documents, beam=None) -> str:
  """The given vocab_path, or the vocab.txt trained on the train documents (`documents()`
  builds or reuses them: only called when the vocabulary is built)."""
  if cfg.vocab_path:
    tokenizer_lib.load_tokenizer(cfg.vocab_path, cfg.lowercase)  # fail early: missing specials
    return os.path.expanduser(cfg.vocab_path)  # local or gs://: read through epath

  def build(root: str) -> None:
    path = os.path.join(root, "vocab.txt")
    if paths.resolve(path).exists():  # save_vocab writes it atomically
      return
    # One deterministic vocabulary from a deterministic sample (beam_vocab.py).
    documents_dir, corpus_stats, _ = documents()
    fraction = wordpiece.sample_fraction(corpus_stats.get("train_characters", 0), sample_chars)
    args = (documents_dir, path, cfg.vocab_size, cfg.lowercase is not False, fraction)
    if beam:
      beam_vocab.build_on_beam(beam, *args)
    else:
      beam_vocab.build_in_process(*args)

  sample_chars = cfg.get("vocab_sample_chars", 10**9)  # absent from older saved configs
  name = "vocab-" + levels.content_hash([corpus_hash, cfg.vocab_size, cfg.lowercase, sample_chars])
  return os.path.join(_ensure(store, beam)(name, "vocab.txt", build), "vocab.txt")


def _prepare_instances(cfg, data_dir: str, root: str, documents_dir: str, vocab_path: str,
                       tok, settings, corpus_stats: dict, t_docs: float,
                       t_vocab: float, beam=None) -> None:
  """Builds the instances dataset in `root` unless its prepared.json (written last) exists."""
  done = os.path.join(root, "prepared.json")
  if paths.resolve(done).exists():
    return
  levels.remove(root)
  start = time.time()
  # Auto: worker processes only for corpora of many shards; spawning one costs a few
  # seconds of imports, more than the embedded corpus takes in-process.
  shards = corpus_stats.get("documents", 0) / cfg.shard_documents
  processes = cfg.prepare_processes or max(1, min(os.cpu_count() or 1, int(shards // 4)))
  common = dict(documents_dir=documents_dir, tokenizer_json=tok.to_str(), settings=settings,
                shard_documents=cfg.shard_documents, data_dir=root, file_format="array_record")
  if beam:
    summary = os.path.join(root, "summary.beam.npz")
    make_builder = lambda splits: beam_instances.BeamInstancesBuilder(
        summary_path=summary, splits=splits, **common)
  else:
    make_builder = lambda splits: instances_builder.InstancesBuilder(
        processes=processes, splits=splits, **common)
  splits = list(tfds.builder_from_directory(documents_dir).info.splits)
  builder = _build(make_builder, root, splits, beam)
  if builder is None:
    raise ValueError(f"No training instance: every train document of {documents_dir} is "
                     "empty once tokenized.")
  seconds = time.time() - start
  buffer = io.BytesIO()
  np.save(buffer, builder.unigram_counts)
  paths.write_atomically(os.path.join(root, "unigram_counts.npy"), buffer.getvalue())
  documents = sum(s.get("documents", 0) for s in builder.stats.values())
  tokens = sum(s.get("tokens", 0) for s in builder.stats.values())
  # Paths inside data_dir are stored relative to it: the directory can move.
  rel = lambda p: levels.relative(p, data_dir) if levels.inside(p, data_dir) else p
  record = {
      "instances_dir": rel(builder.data_path), "documents_dir": rel(documents_dir),
      "vocab_path": rel(vocab_path), "config": cfg.to_dict(),
      "stats": {"corpus": corpus_stats, "instances": builder.stats,
                "seconds": {"documents": t_docs, "vocab": t_vocab, "instances": seconds},
                "documents_per_second": documents / max(seconds, 1e-9),
                "tokens_per_second": tokens / max(seconds, 1e-9)}}
  levels.write_json(done, record)


def _in_place(store: mirror.Mirror, beam) -> bool:
  """True when the levels are built where data_dir says, not on this host then uploaded:
  Beam stages with a gs:// data_dir, whose workers write the shards into the bucket."""
  return bool(beam) and store.remote is not None


def _ensure(store: mirror.Mirror, beam):
  return store.ensure_in_place if _in_place(store, beam) else store.ensure


def prepare(cfg, verbose: bool = True, beam=None) -> prepared_data.PreparedData:
  """Builds (or reuses) documents, vocab and instances for a data config; prints a summary.

  `beam`: a beam_util.BeamRun to build what is missing with Beam pipelines; None: here.

  Raises:
    FileNotFoundError: a corpus glob matches nothing / the vocab path does not exist.
    ValueError: an empty corpus, a vocab without the special tokens, a bad config value.
  """
  return prepare_named(cfg, verbose, beam)[0]


def prepare_named(cfg, verbose: bool = True, beam=None) -> tuple[prepared_data.PreparedData, str]:
  """`prepare`, and the name of the instances directory under data_dir (`nsp-<hash>`):
  what the other hosts of a pod `open_prepared` (data/hosts.py, prepared_data.py)."""
  _check_config(cfg)
  if beam:
    beam.check_data_dir(cfg.data_dir)
  store = prepared_data.store_of(cfg)
  corpus_hash = levels.content_hash(levels.corpus_key(cfg))
  # Documents are read only to build the vocabulary or the instances: a run that finds
  # both (here or in the bucket) never touches them.
  documents = functools.cache(lambda: _ensure_documents(cfg, store, corpus_hash, beam))
  start = time.time()
  vocab_path = _prepare_vocab(cfg, store, corpus_hash, documents, beam)
  t_vocab = time.time() - start  # less the documents, if training the vocab built them
  t_vocab -= documents()[2] if documents.cache_info().currsize else 0.0
  lowercase = prepared_data.lowercase_of(cfg)
  tok = tokenizer_lib.load_tokenizer(vocab_path, lowercase)
  settings = instances.InstanceSettings(
      mode=cfg.mode, max_seq_length=cfg.max_seq_length, short_seq_prob=cfg.short_seq_prob,
      dupe_factor=cfg.dupe_factor, pack_across_documents=cfg.pack_across_documents,
      seed=cfg.seed)
  name = f"{cfg.mode}-" + levels.content_hash(
      [corpus_hash, levels.vocab_digest(vocab_path), lowercase, cfg.shard_documents,
       dataclasses.asdict(settings)])

  in_place = _in_place(store, beam)

  def build(root: str) -> None:
    if not paths.resolve(os.path.join(root, "prepared.json")).exists():
      documents_dir, corpus_stats, t_docs = documents()
      _prepare_instances(cfg, store.remote if in_place else store.local, root,
                         documents_dir, vocab_path, tok, settings, corpus_stats, t_docs,
                         t_vocab, beam)

  _ensure(store, beam)(name, "prepared.json", build)
  # Built in the bucket: read there; the hosts that train copy it (open_prepared).
  return prepared_data.open_prepared(cfg, name, verbose, copy=not in_place), name


def _ensure_documents(cfg, store: mirror.Mirror, corpus_hash: str,
                      beam=None) -> tuple[str, dict, float]:
  built = []
  root = _ensure(store, beam)("documents-" + corpus_hash, "corpus_stats.json",
                              lambda root: built.append(_prepare_documents(cfg, root, beam)))
  return built[0] if built else _prepare_documents(cfg, root, beam)  # copied: read its record
