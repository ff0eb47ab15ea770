"""Prepare once, then load: grain over the tfds array_record instances, masked per step.

  prepared = prepare(config.data)            # idempotent, config-hashed subdirs
  it = make_train_iterator(config.data, prepared, batch_size_per_process)
  batch = next(it)                           # dict of numpy arrays, see BATCH_KEYS
  arrays = to_global_arrays(batch, mesh)     # the only JAX call of the data path

Train stream: a global shuffle of all instances (a fresh keyed permutation every
epoch, computed per batch in numpy), strided over processes: process p of S takes
global positions p, p + S, ..., so batch j of the S processes together holds the same
examples whatever S is. A sequence's mask depends on (seed, epoch, instance index) only
(see Masker), so worker count and resumption never change it. Iterator state:
`it.get_state()/set_state()`, saved with orbax through `checkpoint_save_args` /
`checkpoint_restore_args`.

Layout under data_dir: documents-<hash>/ (tfds), vocab-<hash>/vocab.txt (if trained),
<mode>-<hash>/ (tfds instances + unigram_counts.npy + prepared.json, written last).
Run `prepare` once per data_dir (on process 0 before a barrier, or per host on local
disk): concurrent builds of the same directory would race.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import sys
import time
from typing import Any, Optional

import grain
import numpy as np
import tensorflow_datasets as tfds
from tensorflow_datasets.proto import tf_example_pb2

from bert_jax.data import corpora
from bert_jax.data import instances
from bert_jax.data import sampling
from bert_jax.data import tokenizer as tokenizer_lib

# Every batch (train and eval) has exactly these keys.
BATCH_KEYS = (
    "input_ids",  # [B, L] int32, masked
    "input_mask",  # [B, L] int32, 1 real token, 0 padding
    "segment_ids",  # [B, L] int32, nsp: 0 A / 1 B; mlm_packed: document number from 1, 0 pad
    "masked_lm_positions",  # [B, P] int32, ascending, 0-padded
    "masked_lm_ids",  # [B, P] int32, original ids, 0-padded
    "masked_lm_weights",  # [B, P] float32, 1 real prediction, 0 padding
    "next_sentence_labels",  # [B] int32, 1 = B is random (google-research/bert)
    "next_sentence_weights",  # [B] float32, 0 for padding examples and in mlm_packed mode
)
_FORMAT = "1"  # bump when the prepared layout changes: old dirs are then not reused


def _hash(obj) -> str:
  return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def _inside(path, directory: str) -> bool:
  path, directory = os.path.abspath(path), os.path.abspath(directory)
  return os.path.commonpath([path, directory]) == directory


def _vocab_digest(path: str) -> str:
  """Content hash of a vocab file, or of the tokenizer files of an HF directory."""
  names = ("tokenizer.json", "vocab.txt", "tokenizer_config.json")
  files = [os.path.join(path, n) for n in names] if os.path.isdir(path) else [path]
  digest = hashlib.sha256()
  for name in filter(os.path.exists, files):
    with open(name, "rb") as f:
      digest.update(f.read())
  return digest.hexdigest()[:16]


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


def _corpus_key(cfg) -> dict:
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


def _prepare_documents(cfg, root: str) -> tuple[str, dict, float]:
  stats_path = os.path.join(root, "corpus_stats.json")
  if os.path.exists(stats_path):
    with open(stats_path) as f:
      saved = json.load(f)
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
  with open(stats_path, "w") as f:
    json.dump({"dataset_dir": os.path.relpath(builder.data_path, root), "stats": stats}, f,
              indent=1)
  return os.fspath(builder.data_path), stats, time.time() - start


def _prepare_vocab(cfg, data_dir: str, corpus_hash: str, documents_dir: str) -> str:
  if cfg.vocab_path:
    tokenizer_lib.load_tokenizer(cfg.vocab_path, cfg.lowercase)  # fail early: missing specials
    return os.path.expanduser(cfg.vocab_path)
  path = os.path.join(data_dir, "vocab-" + _hash([corpus_hash, cfg.vocab_size, cfg.lowercase]),
                      "vocab.txt")
  if not os.path.exists(path):
    source = tfds.builder_from_directory(documents_dir).as_data_source(split="train")
    texts = (d["text"].decode("utf-8") for d in source)
    tok = tokenizer_lib.train_wordpiece(texts, cfg.vocab_size, cfg.lowercase is not False)
    tokenizer_lib.save_vocab(tok, path)
  return path


def prepare(cfg, verbose: bool = True) -> PreparedData:
  """Builds (or reuses) documents, vocab and instances for a data config; prints a summary.

  Raises:
    FileNotFoundError: a corpus glob matches nothing / the vocab path does not exist.
    ValueError: an empty corpus, a vocab without the special tokens, a bad config value.
  """
  _check_config(cfg)
  data_dir = os.path.expanduser(cfg.data_dir)
  corpus_hash = _hash(_corpus_key(cfg))
  documents_dir, corpus_stats, t_docs = _prepare_documents(
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
  root = os.path.join(data_dir, f"{cfg.mode}-" + _hash(
      [corpus_hash, _vocab_digest(vocab_path), lowercase, cfg.shard_documents,
       dataclasses.asdict(settings)]))
  done = os.path.join(root, "prepared.json")
  if not os.path.exists(done):
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
  with open(done) as f:
    record = json.load(f)
  prepared = PreparedData(
      instances_dir=os.path.join(data_dir, record["instances_dir"]),
      documents_dir=os.path.join(data_dir, record["documents_dir"]),
      vocab_path=os.path.join(data_dir, record["vocab_path"]), lowercase=lowercase,
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


# ------------------------------------------------------------------------- loading
class InstanceSource:
  """Random access to prepared instances as (input_ids, segment_ids, is_random_next).

  Reads raw records through tfds' array_record data source and parses the tf.Example
  protos directly (np.frombuffer on the bytes-encoded features): ~8x faster than the
  generic per-feature decode. The first record is checked against tfds' own decode.
  """

  def __init__(self, instances_dir: str, split: str, check: bool = True):
    self._args = (instances_dir, split)
    builder = tfds.builder_from_directory(instances_dir)
    self._source = builder.as_data_source(
        split=split, deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES)
    if check and len(self._source):
      ref = builder.info.features.deserialize_example_np(self._source[0])
      mine = self[0]
      if not (np.array_equal(ref["input_ids"], mine[0])
              and np.array_equal(ref["segment_ids"], mine[1]) and ref["is_random_next"] == mine[2]):
        raise RuntimeError("Fast instance decoding disagrees with tfds: update InstanceSource.")

  def __getstate__(self):  # grain worker processes reopen the files
    return self._args

  def __setstate__(self, args):
    self.__init__(*args, check=False)

  def __len__(self) -> int:
    return len(self._source)

  def _parse(self, record: bytes):
    f = tf_example_pb2.Example.FromString(record).features.feature
    return (np.frombuffer(f["input_ids"].bytes_list.value[0], np.int32),
            np.frombuffer(f["segment_ids"].bytes_list.value[0], np.int32),
            int(f["is_random_next"].int64_list.value[0]))

  def __getitem__(self, index: int):
    return self._parse(self._source[index])

  def __getitems__(self, indices):
    return [self._parse(r) for r in self._source.__getitems__(list(indices))]


class BatchMaker:
  """[B, 2] (epoch, instance index; -1 = padding example) -> a masked batch dict."""

  def __init__(self, source: InstanceSource, masker: instances.Masker, max_seq_length: int,
               pad_id: int, nsp: bool):
    self.source, self.masker = source, masker
    self.max_seq_length, self.pad_id, self.nsp = max_seq_length, pad_id, nsp

  def __call__(self, keys: np.ndarray) -> dict[str, np.ndarray]:
    keys = np.asarray(keys).reshape(-1, 2)
    epoch, index = keys[:, 0], keys[:, 1]
    real = index >= 0
    records = self.source.__getitems__(index[real].tolist())
    lengths = np.zeros(len(keys), np.int64)
    lengths[real] = [len(r[0]) for r in records]
    input_mask = np.arange(self.max_seq_length) < lengths[:, None]  # [B, L]
    input_ids = np.full(input_mask.shape, self.pad_id, np.int32)
    segment_ids = np.zeros(input_mask.shape, np.int32)
    if records:  # a boolean-mask write fills rows in order: one copy for the whole batch
      input_ids[input_mask] = np.concatenate([r[0] for r in records])
      segment_ids[input_mask] = np.concatenate([r[1] for r in records])
    labels = np.zeros(len(keys), np.int32)
    labels[real] = [r[2] for r in records]
    batch = self.masker(input_ids, epoch, np.maximum(index, 0))
    batch.update(
        input_mask=input_mask.astype(np.int32), segment_ids=segment_ids,
        next_sentence_labels=labels,
        next_sentence_weights=(real & self.nsp).astype(np.float32))
    return {k: batch[k] for k in BATCH_KEYS}


class TrainKeys:
  """Batch j of process p -> [B, 2] (epoch, instance index), the global shuffle vectorized.

  Global stream position k holds instance permute(k mod n) of epoch k // n; process p of
  S takes positions p, p + S, ... Grain's per-example shuffle/slice/batch chain costs
  ~40 us an example in Python, more than reading and masking it: this is one numpy pass.
  """

  def __init__(self, n: int, batch_size: int, shard_index: int, shard_count: int, seed: int):
    self.n, self.batch_size, self.seed = n, batch_size, seed
    self.shard_index, self.shard_count = shard_index, shard_count

  def __call__(self, j: int) -> np.ndarray:
    pos = (j * self.batch_size + np.arange(self.batch_size)) * self.shard_count
    pos += self.shard_index  # [B] global stream positions
    epoch = pos // self.n
    # A key per epoch (index 2^64 - 1, which no example has): a fresh order every epoch.
    key = sampling.example_keys(self.seed, epoch, np.full(len(pos), 2**64 - 1, np.uint64))
    return np.stack([epoch, sampling.permute(pos % self.n, self.n, key)], axis=1)


class EvalKeys:
  def __init__(self, indices: np.ndarray, batch_size: int):
    self.indices, self.batch_size = indices, batch_size

  def __call__(self, j: int) -> np.ndarray:
    index = self.indices[j * self.batch_size:(j + 1) * self.batch_size]
    return np.stack([np.zeros_like(index), index], axis=1)


def make_masker(cfg, prepared: PreparedData, seed: int) -> instances.Masker:
  tok = prepared.tokenizer()
  # Bracketed tokens ([PAD], [unused7], ...) are never chosen nor drawn.
  vocab = tok.get_vocab(with_added_tokens=True)
  special = [i for t, i in vocab.items() if len(t) > 2 and t[0] == "[" and t[-1] == "]"]
  weights = prepared.unigram_counts if cfg.random_token == "unigram" else None
  return instances.Masker(
      special_ids=special, vocab_size=prepared.vocab_size, mask_id=prepared.special.mask,
      max_predictions=cfg.max_predictions_per_seq, masked_lm_prob=cfg.masked_lm_prob,
      replacement_weights=weights, whole_word_mask=cfg.whole_word_mask,
      continuation=tokenizer_lib.continuation_mask(tok), seed=seed)


def _process_shard(shard_index, shard_count) -> tuple[int, int]:
  if shard_index is None or shard_count is None:
    options = grain.sharding.ShardByJaxProcess(drop_remainder=True)
    return options.shard_index, options.shard_count
  if not 0 <= shard_index < shard_count:
    raise ValueError(f"shard_index={shard_index} not in [0, shard_count={shard_count}).")
  return shard_index, shard_count


def _iterate(cfg, ds, num_workers: Optional[int]):
  it = ds.to_iter_dataset(grain.ReadOptions(num_threads=cfg.read_threads,
                                            prefetch_buffer_size=cfg.prefetch_batches))
  workers = cfg.num_workers if num_workers is None else num_workers
  if workers > 0:
    from absl import flags  # pylint: disable=g-import-not-at-top
    if not flags.FLAGS.is_parsed():  # grain's workers read absl flags; outside absl.app
      flags.FLAGS.mark_as_parsed()  # (notebooks, tests) their defaults are what we want
    it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
  return iter(it)


def make_train_iterator(cfg, prepared: PreparedData, batch_size_per_process: int,
                        seed: Optional[int] = None, shard_index: Optional[int] = None,
                        shard_count: Optional[int] = None,
                        num_workers: Optional[int] = None) -> grain.DatasetIterator:
  """Infinite iterator of train batches (dicts, see BATCH_KEYS) for this process.

  Args:
    seed: shuffle and mask seed (default cfg.seed).
    shard_index, shard_count: this process's place; default jax.process_index/count.
    num_workers: grain worker processes (default cfg.num_workers).

  Returns:
    A grain DatasetIterator: `next()`, `get_state()`, `set_state()`.
  """
  seed = cfg.seed if seed is None else seed
  shard_index, shard_count = _process_shard(shard_index, shard_count)
  source = InstanceSource(prepared.instances_dir, "train")
  n = len(source)
  if n < shard_count * batch_size_per_process:
    raise ValueError(f"{n} train instances cannot fill one batch of "
                     f"{batch_size_per_process} on each of {shard_count} processes.")
  ds = grain.MapDataset.range(sys.maxsize)  # batch numbers: an endless stream of epochs
  ds = ds.map(TrainKeys(n, batch_size_per_process, shard_index, shard_count, seed))
  ds = ds.map(BatchMaker(source, make_masker(cfg, prepared, seed), cfg.max_seq_length,
                         prepared.special.pad, cfg.mode == "nsp"))
  return _iterate(cfg, ds, num_workers)


def num_eval_batches(prepared: PreparedData, batch_size_per_process: int,
                     shard_count: int, split: str = "validation") -> int:
  return _eval_batches(prepared.num_examples[split], batch_size_per_process, shard_count)


def _eval_batches(n: int, batch_size: int, shard_count: int) -> int:
  per_process = -(-n // shard_count)
  return -(-per_process // batch_size)


def eval_shard_indices(n: int, batch_size: int, shard_index: int, shard_count: int):
  """[batches * batch_size] example indices of this process (p, p + S, ...), -1 padded so
  that every process runs the same number of eval batches."""
  indices = np.full(_eval_batches(n, batch_size, shard_count) * batch_size, -1, np.int64)
  mine = np.arange(shard_index, n, shard_count)
  indices[:len(mine)] = mine
  return indices


def make_eval_iterator(cfg, prepared: PreparedData, batch_size_per_process: int,
                       seed: Optional[int] = None, shard_index: Optional[int] = None,
                       shard_count: Optional[int] = None, split: str = "validation",
                       num_workers: Optional[int] = None) -> grain.DatasetIterator:
  """Finite, deterministic, unshuffled eval batches; every example exactly once.

  Process p takes instances p, p + S, ...; all processes yield the same number of
  batches (`num_eval_batches`), the missing examples being padding: all-[PAD] rows with
  masked_lm_weights and next_sentence_weights 0, so weighted metrics ignore them.
  Masks are fixed (epoch 0 of `seed`) so eval numbers are comparable across runs.
  """
  seed = cfg.seed if seed is None else seed
  shard_index, shard_count = _process_shard(shard_index, shard_count)
  if not prepared.num_examples.get(split):
    raise ValueError(f"No {split} instances in {prepared.instances_dir}: the corpus is too "
                     "small for its validation_fraction, or the fraction is 0.")
  source = InstanceSource(prepared.instances_dir, split)
  indices = eval_shard_indices(len(source), batch_size_per_process, shard_index, shard_count)
  ds = grain.MapDataset.range(len(indices) // batch_size_per_process)
  ds = ds.map(EvalKeys(indices, batch_size_per_process))
  ds = ds.map(BatchMaker(source, make_masker(cfg, prepared, seed), cfg.max_seq_length,
                         prepared.special.pad, cfg.mode == "nsp"))
  return _iterate(cfg, ds, num_workers)


# ------------------------------------------------------------------ to devices, saving
def to_global_arrays(batch: dict, mesh, data_axes=("data", "fsdp")) -> dict:
  """Per-process host batches -> global jax.Arrays, batch dim sharded over `data_axes`.

  Axes missing from the mesh are skipped; other dims are replicated. The global batch
  is the concatenation of the processes' batches in process order.
  """
  import jax  # pylint: disable=g-import-not-at-top
  from jax.sharding import NamedSharding, PartitionSpec  # pylint: disable=g-import-not-at-top
  axes = tuple(a for a in data_axes if a in mesh.axis_names)
  sharding = NamedSharding(mesh, PartitionSpec(axes or None))
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def checkpoint_save_args(iterator) -> Any:
  """orbax args saving a grain iterator: one JSON state file per process.

  With an orbax CheckpointManager:
    mngr.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), data_iter=checkpoint_save_args(it)))
  """
  return grain.checkpoint.CheckpointSave(iterator)


def checkpoint_restore_args(iterator) -> Any:
  """orbax args restoring into an iterator built with the same config and shard:
    mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state),
        data_iter=checkpoint_restore_args(it)))
  """
  return grain.checkpoint.CheckpointRestore(iterator)
