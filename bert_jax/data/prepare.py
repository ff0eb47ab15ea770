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
straight into the bucket instead, shards by the workers (data/beam_remote.py), and
the launcher copies nothing. On a pod only process 0 prepares; the others `open_prepared` the
directory it names (data/hosts.py). Reused datasets have their shards checked against
the record counts tfds wrote (a truncated array_record opens as empty).
With a Beam runner (`prepare(cfg, beam=beam_util.BeamRun(...))`, or the command
`python -m bert_jax.prepare --config ... --beam_runner ...`) the three stages run as
Beam pipelines (beam_documents.py, beam_vocab.py, beam_instances.py) that write the same
datasets into the same directories: training reuses them as if built in process.
Loading is data/loader.py.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import os
import re
import shutil
import time
from typing import Optional

import numpy as np
import tensorflow_datasets as tfds

from bert_jax import paths
from bert_jax.data import beam_documents
from bert_jax.data import beam_instances
from bert_jax.data import beam_vocab
from bert_jax.data import corpora
from bert_jax.data import instances
from bert_jax.data import mirror
from bert_jax.data import tokenizer as tokenizer_lib
from bert_jax.data import wordpiece

_FORMAT = "2"  # bump when the prepared layout changes: old dirs are then not reused


# Re-exported: the lock and the error belong to every level, local or mirrored.
CorruptDataError = mirror.CorruptDataError
build_lock = mirror.build_lock


def check_shards(dataset_dir: str, root: str) -> None:
  """Every array_record shard of a prepared tfds dataset exists and holds the records
  its dataset_info.json counts; else a CorruptDataError naming the file and the fix."""
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
        raise CorruptDataError(
            f"prepared data is damaged: {path} {state}, its dataset_info.json counts "
            f"{want}. Remove it and prepare again with the same command: rm -rf {root}")


def content_hash(obj) -> str:
  return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def _inside(path, directory: str) -> bool:
  if paths.is_remote(path) or paths.is_remote(directory):
    return str(path).startswith(str(directory).rstrip("/") + "/")
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


def _relative(path, directory: str) -> str:
  return os.path.relpath(os.fspath(path), os.fspath(directory))  # gs:// urls too


def _read_json(path: str):
  return json.loads(paths.resolve(path).read_text())


def _write_json(path: str, record) -> None:
  paths.write_atomically(path, json.dumps(record, indent=1))


def _in_data_dir(data_dir: str, path: str) -> str:
  """A path prepared.json recorded: relative to data_dir, or as given (absolute, gs://)."""
  return path if paths.is_remote(path) else os.path.join(data_dir, path)


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
  if cfg.corpus == "text" or (cfg.corpus == "tfds" and cfg.text_files):
    # files identified by path, size and mtime (corpus=tfds: added to the dataset)
    key["files"] = [corpora.file_identity(p) for p in corpora.expand_globs(cfg.text_files)]
  if cfg.corpus == "tfds":
    if not cfg.tfds_name:
      raise ValueError("corpus='tfds' needs config.tfds_name, e.g. 'wikipedia/20230601.en'.")
    key.update(name=cfg.tfds_name, text_key=cfg.tfds_text_key, split=cfg.tfds_split)
  return key


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
        _remove(os.fspath(stale))


def prepare_documents(cfg, root: str, beam=None) -> tuple[str, dict, float]:
  with build_lock(root):
    return _prepare_documents(cfg, root, beam)


def _prepare_documents(cfg, root: str, beam) -> tuple[str, dict, float]:
  stats_path = os.path.join(root, "corpus_stats.json")
  if paths.resolve(stats_path).exists():
    saved = _read_json(stats_path)
    check_shards(os.path.join(root, saved["dataset_dir"]), root)
    return os.path.join(root, saved["dataset_dir"]), saved["stats"], 0.0
  _remove(root)  # a crashed earlier attempt
  start = time.time()
  stats = corpora.Stats()

  sources = corpora.sources(cfg, beam.download_config() if beam else None)

  def make_builder(splits):
    paths.resolve(root).mkdir(parents=True, exist_ok=True)
    common = dict(validation_fraction=cfg.validation_fraction, splits=splits, data_dir=root,
                  file_format="array_record")
    if beam:
      builder = beam_documents.BeamDocumentsBuilder(sources=sources, **common)
    else:
      builder = corpora.DocumentsBuilder(
          documents_fn=lambda stats: corpora.keyed_documents(sources, stats), spill_dir=root,
          **common)
    builder.stats = stats  # filled by each pass, kept if the build fails
    return builder

  splits = ("train", "validation") if cfg.validation_fraction > 0 else ("train",)
  builder = _build(make_builder, root, splits, beam)
  stats = dict(stats)
  if builder is None:
    _remove(root)
    where = {"text": cfg.text_files, "tfds": cfg.tfds_name}.get(cfg.corpus, "embedded")
    raise ValueError(f"The corpus ({cfg.corpus}: {where}) has no non-empty training "
                     f"document; counts: {stats}.")
  # Written last, atomically: "this build is done".
  _write_json(stats_path, {"dataset_dir": _relative(builder.data_path, root), "stats": stats})
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
  name = "vocab-" + content_hash([corpus_hash, cfg.vocab_size, cfg.lowercase, sample_chars])
  return os.path.join(_ensure(store, beam)(name, "vocab.txt", build), "vocab.txt")


def _prepare_instances(cfg, data_dir: str, root: str, documents_dir: str, vocab_path: str,
                       tok, settings, corpus_stats: dict, t_docs: float,
                       t_vocab: float, beam=None) -> None:
  """Builds the instances dataset in `root` unless its prepared.json (written last) exists."""
  done = os.path.join(root, "prepared.json")
  if paths.resolve(done).exists():
    return
  _remove(root)
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
    make_builder = lambda splits: corpora.InstancesBuilder(
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
  rel = lambda p: _relative(p, data_dir) if _inside(p, data_dir) else p
  record = {
      "instances_dir": rel(builder.data_path), "documents_dir": rel(documents_dir),
      "vocab_path": rel(vocab_path), "config": cfg.to_dict(),
      "stats": {"corpus": corpus_stats, "instances": builder.stats,
                "seconds": {"documents": t_docs, "vocab": t_vocab, "instances": seconds},
                "documents_per_second": documents / max(seconds, 1e-9),
                "tokens_per_second": tokens / max(seconds, 1e-9)}}
  _write_json(done, record)


def _remove(root: str) -> None:
  """Removes what a crashed earlier build left (a directory, local or gs://)."""
  if paths.is_remote(root):
    paths.resolve(root).rmtree(missing_ok=True)
  else:
    shutil.rmtree(root, ignore_errors=True)


def _in_place(store: mirror.Mirror, beam) -> bool:
  """True when the levels are built where data_dir says, not on this host then uploaded:
  Beam stages with a gs:// data_dir, whose workers write the shards into the bucket."""
  return bool(beam) and store.remote is not None


def _ensure(store: mirror.Mirror, beam):
  return store.ensure_in_place if _in_place(store, beam) else store.ensure


def _store(cfg) -> mirror.Mirror:
  return mirror.Mirror(cfg.data_dir, cfg.get("cache_dir") or "~/bert_jax_cache")


def _lowercase(cfg):
  # A trained vocab is uncased unless lowercase=False; a given one keeps its own casing
  # unless lowercase says otherwise.
  return cfg.lowercase if cfg.vocab_path else cfg.lowercase is not False


def prepare(cfg, verbose: bool = True, beam=None) -> PreparedData:
  """Builds (or reuses) documents, vocab and instances for a data config; prints a summary.

  `beam`: a beam_util.BeamRun to build what is missing with Beam pipelines; None: here.

  Raises:
    FileNotFoundError: a corpus glob matches nothing / the vocab path does not exist.
    ValueError: an empty corpus, a vocab without the special tokens, a bad config value.
  """
  return prepare_named(cfg, verbose, beam)[0]


def prepare_named(cfg, verbose: bool = True, beam=None) -> tuple[PreparedData, str]:
  """`prepare`, and the name of the instances directory under data_dir (`nsp-<hash>`):
  what the other hosts of a pod `open_prepared` (data/hosts.py)."""
  _check_config(cfg)
  if beam:
    beam.check_data_dir(cfg.data_dir)
  store = _store(cfg)
  corpus_hash = content_hash(corpus_key(cfg))
  # Documents are read only to build the vocabulary or the instances: a run that finds
  # both (here or in the bucket) never touches them.
  documents = functools.cache(lambda: _ensure_documents(cfg, store, corpus_hash, beam))
  start = time.time()
  vocab_path = _prepare_vocab(cfg, store, corpus_hash, documents, beam)
  t_vocab = time.time() - start  # less the documents, if training the vocab built them
  t_vocab -= documents()[2] if documents.cache_info().currsize else 0.0
  lowercase = _lowercase(cfg)
  tok = tokenizer_lib.load_tokenizer(vocab_path, lowercase)
  settings = instances.InstanceSettings(
      mode=cfg.mode, max_seq_length=cfg.max_seq_length, short_seq_prob=cfg.short_seq_prob,
      dupe_factor=cfg.dupe_factor, pack_across_documents=cfg.pack_across_documents,
      seed=cfg.seed)
  name = f"{cfg.mode}-" + content_hash(
      [corpus_hash, _vocab_digest(vocab_path), lowercase, cfg.shard_documents,
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
  return open_prepared(cfg, name, verbose, copy=not in_place), name


def _ensure_documents(cfg, store: mirror.Mirror, corpus_hash: str,
                      beam=None) -> tuple[str, dict, float]:
  built = []
  root = _ensure(store, beam)("documents-" + corpus_hash, "corpus_stats.json",
                              lambda root: built.append(_prepare_documents(cfg, root, beam)))
  return built[0] if built else _prepare_documents(cfg, root, beam)  # copied: read its record


def open_prepared(cfg, name: str, verbose: bool = True, copy: bool = True) -> PreparedData:
  """The instances directory `name` (and its vocabulary) that a prepare() of this config
  finished, copied to local disk first when data_dir is on gs:// (unless `copy` is False:
  then its paths are the bucket's, for a summary; training reads local copies); never
  builds.

  Raises:
    FileNotFoundError: `name` is not complete under data_dir (not shared with the host
      that prepared it, or not prepared).
    CorruptDataError: a shard does not hold the records its build recorded.
  """
  store = _store(cfg)
  copy = copy or not store.remote
  base = store.local if copy else store.remote
  root = store.fetch(name, "prepared.json") if copy else store.where(name)
  record = _read_json(os.path.join(root, "prepared.json"))
  vocab_path = _in_data_dir(base, record["vocab_path"])
  if copy and not os.path.isabs(record["vocab_path"]) and not paths.is_remote(vocab_path):
    level, file = os.path.split(record["vocab_path"])  # one we trained: vocab-<hash>/
    vocab_path = os.path.join(store.fetch(level, file), file)
  instances_dir = os.path.join(base, record["instances_dir"])
  check_shards(instances_dir, root)
  documents_dir = os.path.join(base, record["documents_dir"])
  if store.remote and not paths.resolve(documents_dir).is_dir():  # not copied: not read
    documents_dir = f"{store.remote}/{record['documents_dir']}"
  lowercase = _lowercase(cfg)
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
