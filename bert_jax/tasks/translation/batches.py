"""Host-side batches of sentence pairs: the vocabulary, the splits and grain iterators.

Batch dict (B rows; S = data.max_source_length, T = data.max_target_length):
  src_ids        int32   [B, S]  source subwords + </s>, 0-padded
  tgt_ids        int32   [B, T]  target subwords + </s>, 0-padded (the labels; the decoder
                                 inputs are these shifted right behind <s>)
  example_weight float32 [B]     0 on padding rows of eval batches
  feature_index  int32   [B]     row of the split (-1 on padding rows)
Bucketed eval/predict batches (data.length_bucket > 0, `bucketed_eval_batches`) are the
same rows cut to [B, S'] / [B, T'], S' and T' the batch's source and target buckets.
Packed train batches (data.pack_length = P > 0: batches by token count, the paper's
"approximately 25000 source and 25000 target tokens") hold several pairs a row:
  src_ids, tgt_ids                     int32 [B, P]  pairs back to back, 0-padded
  src_segment_ids, tgt_segment_ids     int32 [B, P]  pair k of the row is segment k
                                                     (from 1; 0 = padding) on both sides
  src_positions, tgt_positions         int32 [B, P]  restart at 0 in every pair

The numbers corpus is generated on the fly (num2words costs ~0.2 ms a pair, so the
900k training numbers are never materialized): a batch's keys pick training numbers
and the map makes their pairs. Files and tfds splits are encoded once, in memory.
"""
from __future__ import annotations

import sys
import grain
import numpy as np
import tokenizers

from bert_jax.data import buckets
from bert_jax.data import sampling
from bert_jax.runtime import paths as paths_lib
from bert_jax.tasks.skiplog import SkipLog
from bert_jax.tasks.translation import data

TOKENIZER_SAMPLE = 20_000  # pairs of the numbers corpus the vocabulary is learned from


class Encoded:
  """A split as arrays: src_ids [N, S], tgt_ids [N, T], and its raw texts."""

  def __init__(self, pairs, tok, max_source: int, max_target: int, log: SkipLog):
    where = [p.where for p in pairs]
    self.sources = [p.source for p in pairs]
    self.references = [p.target for p in pairs]
    self.src_ids = data.encode(tok, self.sources, max_source, log, where=where)
    self.tgt_ids = data.encode(tok, self.references, max_target, log, where=where)

  def __len__(self) -> int:
    return len(self.sources)

  def rows(self, index: np.ndarray) -> dict:
    return {"src_ids": self.src_ids[index], "tgt_ids": self.tgt_ids[index]}


class NumberRows:
  """Rows of numbers made on demand: index into `numbers` -> encoded pair."""

  def __init__(self, numbers: np.ndarray, tok, max_source: int, max_target: int):
    self.numbers, self.tok = numbers, tok
    self.max_source, self.max_target = max_source, max_target

  def __len__(self) -> int:
    return len(self.numbers)

  def rows(self, index: np.ndarray) -> dict:
    pairs = [data.number_pair(n) for n in self.numbers[index]]
    return {"src_ids": data.encode(self.tok, [p.source for p in pairs], self.max_source),
            "tgt_ids": data.encode(self.tok, [p.target for p in pairs], self.max_target)}


class _Batch:
  """Batch keys [B, 2] (epoch, row; -1 = padding row) -> a batch dict."""

  def __init__(self, source):
    self.source = source

  def __call__(self, keys: np.ndarray) -> dict:
    index = keys[:, 1]
    real = index >= 0
    batch = self.source.rows(np.maximum(index, 0))
    batch["example_weight"] = real.astype(np.float32)
    batch["feature_index"] = np.where(real, index, -1).astype(np.int32)
    return batch


def train_batches(source, batch_size: int, shard_index: int, shard_count: int, seed: int):
  """Endless checkpointable iterator: a fresh permutation of `source` every epoch."""
  ds = grain.MapDataset.range(sys.maxsize)
  ds = ds.map(sampling.TrainKeys(len(source), batch_size, shard_index, shard_count, seed))
  return iter(ds.map(_Batch(source)).to_iter_dataset())


class _Pair:
  """Stream position j of this process -> one pair, unpadded: {"src_ids": [s], "tgt_ids": [t]}.

  The same global shuffle as train_batches (TrainKeys with one row a "batch"), so the
  order is a pure function of (seed, position) and the packer's state is the position.
  """

  def __init__(self, source, shard_index: int, shard_count: int, seed: int):
    self.source = source
    self.keys = sampling.TrainKeys(len(source), 1, shard_index, shard_count, seed)

  def __call__(self, j: int) -> dict:
    row = self.source.rows(self.keys(j)[:, 1])
    return {k: v[0][v[0] > 0] for k, v in row.items()}  # ids are > 0; 0 is padding


def _packed_batch(b: dict) -> dict:
  out = {}
  for side in ("src", "tgt"):
    out[f"{side}_ids"] = b[f"{side}_ids"].astype(np.int32)
    out[f"{side}_segment_ids"] = b[f"{side}_ids_segment_ids"].astype(np.int32)
    out[f"{side}_positions"] = b[f"{side}_ids_positions"].astype(np.int32)
  rows = len(out["src_ids"])
  out["example_weight"] = np.ones(rows, np.float32)
  out["feature_index"] = np.full(rows, -1, np.int32)
  return out


def packed_train_batches(source, batch_size: int, pack_length: int, shard_index: int,
                         shard_count: int, seed: int):
  """Endless checkpointable iterator of [batch_size, pack_length] packed batches.

  Grain's first-fit packer fills `batch_size` rows (bins) with pairs in stream order
  until one does not fit, then emits the rows (shuffled) as one batch; the pair that did
  not fit opens the next batch, so no pair is dropped or cut.
  """
  ds = grain.MapDataset.range(sys.maxsize).map(
      _Pair(source, shard_index, shard_count, seed)).to_iter_dataset()
  ds = grain.experimental.FirstFitPackIterDataset(
      ds, length_struct={"src_ids": pack_length, "tgt_ids": pack_length},
      num_packing_bins=batch_size, seed=seed, shuffle_bins=True)
  return iter(ds.batch(batch_size).map(_packed_batch))


def eval_batches(source, batch_size: int, shard_index: int, shard_count: int):
  """Every row of this shard's part of `source` once, padding rows flagged."""
  indices = sampling.eval_shard_indices(len(source), batch_size, shard_index, shard_count)
  ds = grain.MapDataset.range(len(indices) // batch_size)
  ds = ds.map(sampling.EvalKeys(indices, batch_size))
  return iter(ds.map(_Batch(source)).to_iter_dataset())


class _BucketBatch:
  """(keys [B, 2] (epoch, row; -1 = padding row), (S', T')) -> a batch dict of rows cut
  to S' source and T' target positions (their ids come first, 0-padding after)."""

  def __init__(self, source):
    self.batch = _Batch(source)

  def __call__(self, item) -> dict:
    keys, (src_len, tgt_len) = item
    batch = self.batch(keys)
    batch["src_ids"] = batch["src_ids"][:, :src_len]
    batch["tgt_ids"] = batch["tgt_ids"][:, :tgt_len]
    return batch


def bucketed_eval_batches(source, source_buckets: np.ndarray, target_buckets: np.ndarray,
                          batch_size: int, shard_index: int, shard_count: int):
  """Every row of `source` once, batches in length buckets (data/buckets.py eval_plan):
  rows sorted by source bucket, then target length; each batch padded to the smallest
  source and target buckets holding its longest source and target. Padding rows
  (feature_index -1) only in the first batch; callers restore the order by
  feature_index."""
  lengths = np.stack([(source.src_ids > 0).sum(1), (source.tgt_ids > 0).sum(1)], axis=1)
  plan = buckets.eval_plan(lengths, (source_buckets, target_buckets), batch_size,
                           shard_index, shard_count)
  ds = grain.MapDataset.range(len(plan)).map(plan).map(_BucketBatch(source))
  return iter(ds.to_iter_dataset())


def read_split(d, split: str):
  """(pairs, SkipLog) of config.data `d`'s "train" | "eval" | "test" split (not numbers)."""
  if d.source == "file":
    path = {"train": d.train_file, "eval": d.eval_file, "test": d.get("test_file", "")}[split]
    if not path:
      raise ValueError(f"data.source='file' needs data.{split}_file (a TSV or 'src,tgt').")
    return data.read_file_split(path)
  if d.source == "tfds":
    name = {"train": d.train_split, "eval": d.eval_split, "test": d.test_split}[split]
    pairs, log = data.load_tfds(d.name, name, d.get("tfds_data_dir") or None)
    limit = int(d.max_train_examples if split == "train" else d.max_eval_examples)
    return (pairs[:limit] if limit > 0 else pairs), log
  raise ValueError(f"data.source={d.source!r}: numbers, file or tfds.")


def load_or_train_tokenizer(d, tokenizer_dir: str, train_pairs, write: bool):
  """The workdir's vocabulary (resume, translate) or one learned from the train pairs."""
  path = str(paths_lib.resolve(tokenizer_dir) / "tokenizer.json")  # local or gs://
  if paths_lib.resolve(path).exists():
    tok = tokenizers.Tokenizer.from_str(paths_lib.resolve(path).read_text())
    try:
      data.check_specials(tok)
    except ValueError as e:  # e.g. a GPT or BERT vocabulary: this is another task's workdir
      raise ValueError(f"{path} is not a translation vocabulary ({e}) Is this another "
                       "task's workdir? Give this run its own --workdir, or remove that "
                       "file to learn the vocabulary again.") from e
    return tok
  texts = (t for p in train_pairs() for t in (p.source, p.target))
  tok = data.train_tokenizer(texts, int(d.vocab_size))
  if write:
    paths_lib.write_atomically(path, tok.to_str())
  return tok


def numbers_tokenizer_pairs(seed: int = 0, limit: int = TOKENIZER_SAMPLE):
  return lambda: data.numbers_pairs("train", limit, seed)[0]


def write_test_files(pairs, directory: str, src_name: str, tgt_name: str) -> tuple[str, str]:
  """The test split as two aligned files (for `bert_jax.translate` and the sacrebleu CLI)."""
  paths = (str(paths_lib.resolve(directory) / src_name),
           str(paths_lib.resolve(directory) / tgt_name))  # local or gs://
  for path, texts in zip(paths, ([p.source for p in pairs], [p.target for p in pairs])):
    with paths_lib.open_text_atomically(path) as f:
      f.writelines(t + "\n" for t in texts)
  return paths


class SourceRows:
  """Rows of a translate-CLI input: encoded sources, no targets (tgt_ids all 0)."""

  def __init__(self, features: dict, max_target: int):
    self.src_ids, self.max_target = features["src_ids"], max_target
    self.tgt_ids = np.zeros((len(self.src_ids), max_target), np.int32)

  def __len__(self) -> int:
    return len(self.src_ids)

  def rows(self, index: np.ndarray) -> dict:
    return {"src_ids": self.src_ids[index], "tgt_ids": self.tgt_ids[index]}
