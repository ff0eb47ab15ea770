"""Fine-tuning tasks: the shared part (encoder, tokenizer, in-memory batches, evaluation).

A fine-tuning task is a task like `PretrainingTask` (the shared train/eval steps and
loop in bert_jax/train run it) plus two hooks the loop uses for the official metrics:
`predict_outputs` (per-row model outputs, jitted on device) and `host_metrics` (the
task's metric definitions over the whole eval split, in numpy). The task classes
(classification/, ner/, squad/ task.py) add their data, loss and metrics; this
file holds what they share:

- the encoder: `init_from` (an HF BERT or ModernBERT directory, or one of our
  checkpoints) gives the architecture, the tokenizer and the pretrained weights; without
  it, `config.model` (a variant) and `config.data.vocab` build one from scratch;
- features: numpy arrays built once on the host, in memory (fine-tuning sets are small),
  served by a grain iterator whose state the checkpoints save (exact resume), with a
  fresh shuffle every epoch;
- eval batches: every feature exactly once, padding rows flagged with feature_index -1;
- packed rows (data.packing, tasks that set `packable`: classification and NER):
  several examples a row of max_seq_length, batches of train.batch_size ROWS
  (packing.py); data.packing=False keeps one example a row, batches of batch_size
  examples (google-research/bert's exact batches).
"""
from __future__ import annotations

import math
import os
import sys
from typing import Optional

import grain
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from bert_jax.runtime import multihost
from bert_jax.runtime import paths
from bert_jax.data import sampling
from bert_jax.data import tokenizer as tokenizer_lib
from bert_jax.layers.param_layout import unrolled_to_scan
from bert_jax.tasks.finetune import modernbert
from bert_jax.tasks.finetune import packing
from bert_jax.tasks.finetune import workdir_labels
from bert_jax.train import losses
from bert_jax.train.defaults import for_platform, transformer_config
from bert_jax.train.writer import log

# TransformerConfig fields a fine-tuning config may set on top of a pretrained encoder's
# architecture: numerics, regularization and layout, never sizes.
RUN_FIELDS = ("dtype", "param_dtype", "matmul_dtype", "attention_impl", "scan_layers",
              "remat_policy", "dropout_rate", "attention_dropout_rate")


def _resolve_encoder(config: ml_collections.ConfigDict):
  """(TransformerConfig, tokenizers.Tokenizer) of the config.

  With init_from only its config and tokenizer are read here; the weights are read by
  `load_pretrained_params`, which the loop calls only when it does not resume.
  """
  from bert_jax.checkpoint import pretrained  # pylint: disable=g-import-not-at-top
  path = config.get("init_from") or ""
  vocab = config.data.get("vocab") or ""
  run = {k: v for k, v in config.model.items() if k in RUN_FIELDS}
  if path:
    model_config, _, tokenizer = pretrained.load_encoder(path, with_params=False)
    if vocab:
      tokenizer = modernbert.load_vocab(vocab, model_config.family)
    if tokenizer is None:
      raise ValueError(f"init_from={path} has no tokenizer (vocab.txt / tokenizer.json); "
                       "set config.data.vocab to one.")
    return for_platform(model_config.replace(deterministic=False, **run)), tokenizer
  if not vocab:
    raise ValueError("fine-tuning from scratch needs config.data.vocab (a vocab.txt, a "
                     "tokenizer.json or a directory); or set config.init_from to a "
                     "pretrained checkpoint (an HF BERT directory or one of our workdirs).")
  return transformer_config(config), modernbert.load_vocab(vocab, config.model.get("family"))


def labels_option(config) -> Optional[tuple]:
  """data.labels "a,b,c" (predict: labels.json's list) -> ("a", "b", "c"); None: unset."""
  value = config.data.get("labels") or ""
  items = [str(x) for x in value] if isinstance(value, (list, tuple)) else [
      x.strip() for x in value.split(",")]
  return tuple(x for x in items if x) or None


class Split:
  """What a task reads for its "train" or "eval" role: the dataset's split, file and cap."""

  def __init__(self, config: ml_collections.ConfigDict, role: str):
    d = config.data
    self.role = role  # "train" | "eval"
    self.dataset_split = d.eval_split if role == "eval" else d.train_split  # e.g. "validation"
    self.file = d.eval_file if role == "eval" else d.train_file
    self.limit = int(d.max_eval_examples if role == "eval" else d.max_train_examples)


class _Rows:
  """Batch keys [B, 2] (epoch, feature index; -1 = padding row) -> a dict of rows."""

  def __init__(self, features: dict, fields: tuple):
    self.features = {k: features[k] for k in fields if k in features}

  def __call__(self, keys: np.ndarray) -> dict:
    index = keys[:, 1]
    real = index >= 0
    rows = {k: v[np.maximum(index, 0)] for k, v in self.features.items()}
    rows["example_weight"] = real.astype(np.float32)
    rows["feature_index"] = np.where(real, index, -1).astype(np.int32)
    return rows


def packing_block(data, seq_len: int, max_per_row: int) -> int:
  """data.packing_block resolved: -1 = half a row of >= 128 tokens (with room for an
  example a block), else 0 (off); an explicit block must divide max_seq_length."""
  block = int(data.get("packing_block", -1))
  if block == -1:
    return seq_len // 2 if seq_len >= 128 and seq_len % 2 == 0 and max_per_row >= 2 else 0
  if block and (block < 1 or block >= seq_len or seq_len % block):
    raise ValueError(f"data.packing_block={block} must divide data.max_seq_length="
                     f"{seq_len} into two or more blocks (0: off, -1: automatic).")
  return block


class FinetuneTask:
  """The shared part of the fine-tuning tasks; subclasses set the data and the head."""

  name = "finetune"
  host_scored = True
  summary_keys = ("loss", "accuracy")
  progress_labels = (("accuracy", "acc"),)
  # Feature arrays fed to the model and the loss (subclasses extend).
  fields = ("input_ids", "input_mask", "segment_ids")
  packable = False  # the head and loss take packed rows (data.packing applies)

  def __init__(self, config: ml_collections.ConfigDict):
    self.config = config
    self.model_config, self.tokenizer = _resolve_encoder(config)
    self.model_config = modernbert.run_config(self.model_config, config)  # its pooling
    self.tokenizer_dir = None  # set by prepare(): the workdir's copy of the tokenizer
    if self.tokenizer.get_vocab_size(with_added_tokens=True) > self.model_config.vocab_size:
      raise ValueError(f"the tokenizer has {self.tokenizer.get_vocab_size()} ids, more than "
                       f"the model's vocab_size {self.model_config.vocab_size}.")
    self.seq_len = int(config.data.max_seq_length)
    if self.seq_len > self.model_config.max_len:
      raise ValueError(f"data.max_seq_length={self.seq_len} exceeds the model's "
                       f"{self.model_config.max_len} positions.")
    self.packing = self.packable and bool(config.data.get("packing", False))
    self.max_per_row = int(config.data.get("max_examples_per_row", 16))
    if self.packing and self.max_per_row < 1:
      raise ValueError(f"data.max_examples_per_row={self.max_per_row} must be >= 1.")
    self.block = packing_block(config.data, self.seq_len, self.max_per_row) if self.packing else 0
    self.model = self.build_model(self.model_config)
    self.eval_model = self.build_model(self.model_config.replace(deterministic=True))
    self.train_features: dict = {}
    self.eval_features: dict = {}
    self.class_weights = None  # [classes] loss weights (train.class_weights), from the data
    self.plans: dict = {}  # "train" / "eval" -> packing.PackPlan (data.packing)

  # ----------------------------------------------------------- subclass API
  def build_model(self, model_config):
    raise NotImplementedError

  def read(self, split: Split):
    """(examples, SkipLog) of a split."""
    raise NotImplementedError

  def featurize(self, examples, training: bool, source: str, unlabeled: bool = False):
    """(features holding `fields`, SkipLog); unlabeled: keep examples without labels."""
    raise NotImplementedError

  def read_file_once(self, path: str, read_fn):
    """read_fn(path) -> (examples, SkipLog), cached: a train file that also gave the
    label set is not read twice."""
    if not path:
      raise ValueError(f"{self.name}: data.source='file' needs data.train_file and "
                       "data.eval_file.")
    cache = self.__dict__.setdefault("_file_examples", {})
    if path not in cache:
      cache[path] = read_fn(path)
    return cache[path]

  def train_label_ids(self, features):
    """(label ids, number of classes) for class weights, or None (no classes)."""
    del features
    return None

  def load_split(self, split: str, for_training: bool):
    """(examples, features) of "train" or "eval"; logs what was kept and skipped."""
    s = Split(self.config, split)
    examples, read_log = self.read(s)
    if s.limit:
      examples = examples[:s.limit]
    features, feat_log = self.featurize(examples, for_training,
                                        source=f"{read_log.source} features")
    read_log.merge(feat_log).kept = feat_log.kept
    log(f"{self.name} {split} ({s.dataset_split}): {read_log.summary()}")
    if for_training:
      labels = self.train_label_ids(features)
      self.class_weights = None if labels is None else self.class_weight_array(*labels)
    return examples, features

  def read_unlabeled(self, path: str):
    """(examples without labels, SkipLog) of a predict-mode input file."""
    raise NotImplementedError

  def read_input(self, path: str):
    """(examples, features) of an unlabeled input file (predict mode)."""
    if not os.path.exists(path):
      raise FileNotFoundError(f"predict.input_file {path} does not exist.")
    examples, read_log = self.read_unlabeled(path)
    features, feat_log = self.featurize(examples, False, source=path, unlabeled=True)
    read_log.merge(feat_log).kept = feat_log.kept
    log(f"predict: {read_log.summary()}")
    if not len(features["input_ids"]):
      raise ValueError(f"predict: no usable records in {path} (see the summary above).")
    return examples, features

  # ------------------------------------------------------------------- data
  def prepare(self, workdir: str) -> None:
    # The tokenizer goes into the workdir, so the fine-tuned checkpoints are
    # self-contained (predict mode, embed and HF export read it from there).
    self.tokenizer_dir = str(paths.resolve(workdir) / "tokenizer")  # local or gs://
    refusal = ""  # process 0's verdict, which every process then raises alike
    if jax.process_index() == 0:
      try:
        tokenizer_lib.keep_or_write(
            self.tokenizer, str(paths.resolve(self.tokenizer_dir) / "tokenizer.json"),
            self.config.get("init_from") or "the config's data.vocab")
        workdir_labels.keep_or_write(self, workdir)  # predict mode reads the labels there
      except ValueError as e:
        refusal = str(e)
    refusal = multihost.allgather("workdir-tokenizer", refusal)[0]
    if refusal:
      raise ValueError(refusal)
    self.train_examples, self.train_features = self.load_split("train", True)
    self.eval_examples, self.eval_features = self.load_split("eval", False)
    if not len(self.train_features["input_ids"]):
      raise ValueError(f"{self.name}: no usable training examples (see the skip summary).")
    if self.packing:
      self.plans = {"train": self._plan(self.train_features)}
      log(f"{self.name} train {self.plans['train'].summary(int(self.config.train.batch_size))}")
      if len(self.eval_features.get("input_ids", ())):
        self.plans["eval"] = self._plan(self.eval_features)

  def _plan(self, features: dict) -> packing.PackPlan:
    return packing.PackPlan(features, self.seq_len, self.max_per_row, self.block)

  def steps_per_epoch(self, batch_size: int) -> int:
    if self.packing:
      return self.plans["train"].batches_per_epoch(batch_size)
    return max(1, math.ceil(len(self.train_features["input_ids"]) / batch_size))

  def phase_shapes(self, phase: dict) -> dict:
    del phase
    return {"seq_len": self.seq_len, "num_predictions": 0}

  def train_iterator(self, phase: dict, batch_size: int, shard_index: int, shard_count: int,
                     seed: int):
    del phase
    if self.packing:
      return packing.train_iterator(self.train_features, self.fields, self.plans["train"],
                                    batch_size, shard_index, shard_count, seed)
    n = len(self.train_features["input_ids"])
    ds = grain.MapDataset.range(sys.maxsize)  # batch numbers over an endless epoch stream
    ds = ds.map(sampling.TrainKeys(n, batch_size, shard_index, shard_count, seed))
    ds = ds.map(_Rows(self.train_features, self.fields))
    return iter(ds.to_iter_dataset())

  def eval_iterator(self, phase: dict, batch_size: int, shard_index: int, shard_count: int):
    del phase
    if not len(self.eval_features.get("input_ids", ())):
      raise ValueError(f"{self.name}: no usable evaluation examples (see the skip summary).")
    if self.packing:
      return packing.eval_iterator(self.eval_features, self.fields, self.plans["eval"],
                                   batch_size, shard_index, shard_count)
    return self._batches(self.eval_features, batch_size, shard_index, shard_count)

  def predict_batches(self, features: dict, batch_size: int):
    if self.packing:  # predict.batch_size rows of packed inputs
      return packing.eval_iterator(features, self.fields, self._plan(features), batch_size, 0, 1)
    return self._batches(features, batch_size, 0, 1)

  def _batches(self, features: dict, batch_size: int, shard_index: int, shard_count: int):
    """Every feature of this shard once, in fixed-shape batches (padding rows: index -1)."""
    n = len(features["input_ids"])
    indices = sampling.eval_shard_indices(n, batch_size, shard_index, shard_count)
    ds = grain.MapDataset.range(len(indices) // batch_size)
    ds = ds.map(sampling.EvalKeys(indices, batch_size))
    return iter(ds.map(_Rows(features, self.fields)).to_iter_dataset())

  # ----------------------------------------------------------------- params
  def dummy_batch(self, batch_size: int, seq_len: int, num_predictions: int = 0) -> dict:
    """A batch of the train features' first row (every field, labels included); before
    prepare() only the model inputs, zeros (enough for init / eval_shape)."""
    del seq_len, num_predictions  # always self.seq_len, no MLM predictions
    if self.packing:
      return packing.dummy_batch(self.train_features, self.fields, batch_size, self.seq_len,
                                 self.max_per_row)
    row = {k: v[:1] for k, v in self.train_features.items() if k in self.fields}
    if not row:
      row = {k: np.zeros((1, self.seq_len), np.int32)
             for k in ("input_ids", "input_mask", "segment_ids")}
    batch = {k: np.repeat(v, batch_size, axis=0) for k, v in row.items()}
    batch.update(example_weight=np.ones(batch_size, np.float32),
                 feature_index=np.zeros(batch_size, np.int32))
    return batch

  def init(self, rng, batch):
    return self.model.init({"params": rng, "dropout": rng}, **self._inputs(batch))

  def load_pretrained_params(self, path: str, template):
    """The template (fresh head) with the pretrained encoder of `path` in place of `bert`."""
    if modernbert.is_modernbert(self.model_config):  # under `model` (and `head`)
      return modernbert.load_pretrained_params(path, template)
    from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
    from bert_jax.checkpoint import pretrained
    _, params, _ = pretrained.load_encoder(path)
    if self.model_config.scan_layers:
      params = unrolled_to_scan(params)
    fresh = dict(template["bert"])
    # The pooler: fresh when the checkpoint has none, dropped when the head needs none.
    encoder = {name: params.get(name, sub) for name, sub in fresh.items()}
    checkpoint.check_compatible(encoder, fresh, f"{path} (encoder)")
    return dict(template, bert=jax.tree_util.tree_map(jnp.asarray, encoder))

  # ------------------------------------------------------------------ model
  def _inputs(self, batch):
    inputs = dict(input_ids=batch["input_ids"], input_mask=batch["input_mask"],
                  segment_ids=batch["segment_ids"])
    if "packed_segment_ids" in batch:  # packed rows
      inputs.update(positions=batch["positions"],
                    packed_segment_ids=batch["packed_segment_ids"])
    return inputs

  def apply(self, params, batch, rng, train: bool):
    model = self.model if train else self.eval_model
    rngs = {"dropout": rng} if train else {}
    return model.apply({"params": params}, **self._inputs(batch), rngs=rngs)

  def loss_weights(self, batch):
    return {"task": jnp.sum(self.row_weights(batch))}

  def row_weights(self, batch):
    """Loss weight of each loss unit (example or token); 0 on padding rows."""
    return batch["example_weight"].astype(jnp.float32)

  def metric_sums(self, out, batch):
    return {"loss": self.loss_parts(out, batch)["task"], "weight": jnp.sum(self.row_weights(batch))}

  @staticmethod
  def metric_ratios(sums):
    w = jnp.maximum(sums["weight"], 1e-9)
    ratios = {"task_loss": sums["loss"] / w}
    if "correct" in sums:
      ratios["accuracy"] = sums["correct"] / w
    return ratios

  def flops_per_example(self, seq_len: int, num_predictions: int = 0) -> float:
    """Training FLOPs (3x forward) of one example: the encoder's and the head's."""
    del num_predictions
    return 3.0 * (seq_len * self.model_config.flops_per_token(seq_len)
                  + self.head_flops(seq_len))

  def head_flops(self, seq_len: int) -> float:
    """Forward matmul FLOPs of the head on one example (subclasses)."""
    raise NotImplementedError

  # ------------------------------------------------------------- evaluation
  def predict_outputs(self, out, batch) -> dict:
    """Per-row outputs kept for the host metrics (subclasses add theirs)."""
    return {"feature_index": batch["feature_index"]}

  @staticmethod
  def ordered(outputs: dict) -> dict:
    """Concatenated eval outputs with padding rows dropped, in feature order."""
    keep = outputs["feature_index"] >= 0
    order = np.argsort(outputs["feature_index"][keep], kind="stable")
    return {k: np.asarray(v)[keep][order] for k, v in outputs.items()}

  def host_metrics(self, outputs: dict) -> dict:
    raise NotImplementedError

  def class_weight_array(self, labels, num_classes: int) -> Optional[np.ndarray]:
    """train.class_weights: "" (none), "inverse_frequency", or "w0,w1,...": [C] or None."""
    from bert_jax.tasks.finetune.classification.features import class_weights  # pylint: disable=g-import-not-at-top,line-too-long
    mode = self.config.train.get("class_weights") or ""
    if not mode:
      return None
    if mode != "inverse_frequency" and mode != "uniform":
      try:
        mode = [float(x) for x in mode.split(",")]
      except ValueError as e:
        raise ValueError(f"train.class_weights={mode!r}: 'inverse_frequency', 'uniform' or "
                         f"{num_classes} comma-separated numbers.") from e
    return class_weights(labels, num_classes, mode)

  def classification_loss(self, logits, labels, weights, class_weights=None):
    return losses.softmax_cross_entropy(
        logits, labels, weights, class_weights=class_weights,
        focal_gamma=float(self.config.train.get("focal_gamma", 0.0)))
