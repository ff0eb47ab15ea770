"""Load the prepared instances: grain over tfds array_record, masked per step.

  prepared = prepare.prepare(config.data)    # data/prepare.py: idempotent, cached
  it = make_train_iterator(config.data, prepared, batch_size_per_process)
  batch = next(it)                           # dict of numpy arrays, see BATCH_KEYS
  arrays = parallel.host_to_global(batch, mesh)  # the loop's; no JAX in the data path

Train stream: a global shuffle of all instances (a fresh keyed permutation every
epoch, computed per batch in numpy), strided over processes: process p of S takes
global positions p, p + S, ..., so batch j of the S processes together holds the same
examples whatever S is. A sequence's mask depends on (seed, epoch, instance index) only
(see Masker), so worker count and resumption never change it. Iterator state:
`it.get_state()/set_state()`, saved with every checkpoint (bert_jax/checkpoint/manager.py).
The batch keys of a step (the shuffle and the eval shards) come from sampling.py.
"""
from __future__ import annotations

import os
import sys
from typing import Optional

import grain
import numpy as np
import tensorflow_datasets as tfds
from tensorflow_datasets.proto import tf_example_pb2

from bert_jax.data import masking
from bert_jax.data.mirror import CorruptDataError
from bert_jax.data import sampling
from bert_jax.data import tokenizer as tokenizer_lib
from bert_jax.data.prepared_data import PreparedData

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
    # One record through the source's own __getitem__: its __getitems__ of one index
    # costs ~10x more (tests/data/test_beam.py reads every record this way).
    return self._parse(self._read(lambda: self._source[index]))

  def __getitems__(self, indices):
    return [self._parse(r)
            for r in self._read(lambda: self._source.__getitems__(list(indices)))]

  def _read(self, fetch):
    try:
      return fetch()
    except RuntimeError as e:  # array_record: a chunk whose checksum fails (bad disk, copy)
      instances_dir, split = self._args
      root = os.path.dirname(os.path.dirname(instances_dir))  # <root>/<builder>/<version>
      detail = str(e).splitlines()[0] if str(e) else type(e).__name__
      raise CorruptDataError(
          f"prepared data is damaged: a {split} record of {instances_dir} cannot be read "
          f"({detail}). Remove it and prepare again with the same command: rm -rf {root}"
      ) from None


class BatchMaker:
  """[B, 2] (epoch, instance index; -1 = padding example) -> a masked batch dict."""

  def __init__(self, source: InstanceSource, masker: masking.Masker, max_seq_length: int,
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


def make_masker(cfg, prepared: PreparedData, seed: int,
                masked_lm_prob: Optional[float] = None) -> masking.Masker:
  """The config's masker; masked_lm_prob overrides cfg.masked_lm_prob (eval masks)."""
  masking.check_rates(cfg)
  tok = prepared.tokenizer()
  # Bracketed tokens ([PAD], [unused7], ...) are never chosen nor drawn.
  vocab = tok.get_vocab(with_added_tokens=True)
  special = [i for t, i in vocab.items() if len(t) > 2 and t[0] == "[" and t[-1] == "]"]
  weights = prepared.unigram_counts if cfg.random_token == "unigram" else None
  return masking.Masker(
      special_ids=special, vocab_size=prepared.vocab_size, mask_id=prepared.special.mask,
      max_predictions=cfg.max_predictions_per_seq,
      masked_lm_prob=masked_lm_prob or cfg.masked_lm_prob,
      replacement_weights=weights, whole_word_mask=cfg.whole_word_mask,
      continuation=tokenizer_lib.continuation_mask(tok), seed=seed,
      mask_token_prob=cfg.get("mask_token_prob", 0.8),
      random_token_prob=cfg.get("random_token_prob", 0.1))


def _process_shard(shard_index, shard_count) -> tuple[int, int]:
  if shard_index is None or shard_count is None:
    options = grain.sharding.ShardByJaxProcess(drop_remainder=True)
    return options.shard_index, options.shard_count
  if not 0 <= shard_index < shard_count:
    raise ValueError(f"shard_index={shard_index} not in [0, shard_count={shard_count}).")
  return shard_index, shard_count


def iterate(cfg, ds, num_workers: Optional[int]):
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
                        num_workers: Optional[int] = None,
                        start: int = 0) -> grain.DatasetIterator:
  """Infinite iterator of train batches (dicts, see BATCH_KEYS) for this process.

  Args:
    seed: shuffle and mask seed (default cfg.seed).
    shard_index, shard_count: this process's place; default jax.process_index/count.
    num_workers: grain worker processes (default cfg.num_workers).
    start: the global stream position of the first batch (sampling.TrainKeys).

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
  ds = ds.map(sampling.TrainKeys(n, batch_size_per_process, shard_index, shard_count, seed,
                                 start))
  ds = ds.map(BatchMaker(source, make_masker(cfg, prepared, seed), cfg.max_seq_length,
                         prepared.special.pad, cfg.mode == "nsp"))
  return iterate(cfg, ds, num_workers)


def make_eval_iterator(cfg, prepared: PreparedData, batch_size_per_process: int,
                       seed: Optional[int] = None, shard_index: Optional[int] = None,
                       shard_count: Optional[int] = None, split: str = "validation",
                       num_workers: Optional[int] = None) -> grain.DatasetIterator:
  """Finite, deterministic, unshuffled eval batches; every example exactly once.

  Process p takes instances p, p + S, ...; all processes yield the same number of
  batches (sampling.eval_shard_indices), the missing examples being padding: all-[PAD] rows with
  masked_lm_weights and next_sentence_weights 0, so weighted metrics ignore them.
  Masks are fixed (epoch 0 of `seed`) so eval numbers are comparable across runs; at
  cfg.eval_masked_lm_prob if set (e.g. BERT's 15% for a run that trains at 30%, so runs
  with different training masking rates are scored on the same task).
  """
  seed = cfg.seed if seed is None else seed
  shard_index, shard_count = _process_shard(shard_index, shard_count)
  if not prepared.num_examples.get(split):
    raise ValueError(f"No {split} instances in {prepared.instances_dir}: the corpus is too "
                     "small for its validation_fraction, or the fraction is 0.")
  source = InstanceSource(prepared.instances_dir, split)
  indices = sampling.eval_shard_indices(len(source), batch_size_per_process, shard_index,
                                        shard_count)
  ds = grain.MapDataset.range(len(indices) // batch_size_per_process)
  ds = ds.map(sampling.EvalKeys(indices, batch_size_per_process))
  masker = make_masker(cfg, prepared, seed, cfg.get("eval_masked_lm_prob"))
  ds = ds.map(BatchMaker(source, masker, cfg.max_seq_length,
                         prepared.special.pad, cfg.mode == "nsp"))
  return iterate(cfg, ds, num_workers)
