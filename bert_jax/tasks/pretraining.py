"""The BERT pretraining task: MLM (+ NSP) on BertForPreTraining, or MLM alone on another
encoder family (ModernBERT: models/registry.py).

A task tells the shared train/eval steps how to run its model and which loss and
metric terms it has; the steps own the mechanics (see bert_jax/train/steps.py).
"""
from __future__ import annotations

import os

import jax.numpy as jnp
import ml_collections
import numpy as np

from bert_jax.data import masking
from bert_jax.layers.param_layout import unrolled_to_scan
from bert_jax.models.registry import pretraining_model
from bert_jax.train import losses
from bert_jax.train import phases as phases_lib
from bert_jax.train.defaults import transformer_config


# The fields that decide the params' shapes: an init_from differing in one cannot load.
# (config field, the TransformerConfig attribute holding its effective value)
_SIZE_FIELDS = (("num_layers", "num_layers"), ("hidden_size", "hidden_size"),
                ("num_heads", "num_heads"), ("head_dim", "d_head"), ("mlp_dim", "d_mlp"),
                ("vocab_size", "vocab_size"), ("max_len", "max_len"),
                ("type_vocab_size", "type_vocab_size"),
                # Same shapes, another model: the family and its attention pattern.
                ("family", "family"), ("local_window", "local_window"),
                ("global_every", "global_every"))
# TransformerConfig fields a phase may set for its own steps: the same params, another
# recomputation (remat_policy) or RoPE (rotary_base: ModernBERT's context extension).
PHASE_MODEL_FIELDS = ("remat_policy", "rotary_base")
PHASE_KEYS = phases_lib.LOOP_KEYS + ("max_seq_length", "max_predictions_per_seq"
                                     ) + PHASE_MODEL_FIELDS


class PretrainingTask:
  """MLM + NSP (google-research/bert) or MLM only (RoBERTa-style packed rows)."""

  name = "bert_pretraining"
  host_scored = False
  summary_keys = ("loss", "mlm_accuracy", "nsp_accuracy")
  progress_labels = (("mlm_accuracy", "mlm_acc"), ("nsp_accuracy", "nsp_acc"))

  def __init__(self, config: ml_collections.ConfigDict):
    self.config = config
    masking.check_rates(config.data)  # before any preparation, which can take long
    self.tokenizer_dir = None  # set by prepare(): the directory of the vocabulary
    self.nsp = config.data.mode == "nsp"
    self.model_config = transformer_config(config)
    if self.nsp and self.model_config.family != "bert":
      raise ValueError(f"model.family={self.model_config.family!r} has no next-sentence "
                       "head: set data.mode='mlm_packed' (MLM only).")
    self.model = pretraining_model(self.model_config, nsp=self.nsp)
    self.eval_model = pretraining_model(self.model_config.replace(deterministic=True),
                                        nsp=self.nsp)
    phases_lib.check_keys(config.train.get("phases"), PHASE_KEYS)
    self.phase_models, self.eval_phase_models = self._phase_models()

  def _phase_models(self) -> tuple[dict, dict]:
    """({length: train model}, {length: eval model}) of the phases that set
    PHASE_MODEL_FIELDS: S128 and S512 want different remat policies (configs/bert_large.py),
    ModernBERT extends its context with another global theta. The same params; the jitted
    step picks the model by the batch's (static) length, so phases of one length (a batch
    warmup's stages) must agree on these fields."""
    train, evals, seen = {}, {}, {}
    for i, p in enumerate(map(dict, self.config.train.get("phases") or ())):
      n, fields = self.phase_shapes(p)["seq_len"], {k: p[k] for k in PHASE_MODEL_FIELDS if k in p}
      if "rotary_base" in fields and self.model_config.position != "rotary":
        raise ValueError(f"train.phases[{i}].rotary_base is for rotary positions; "
                         f"model.position={self.model_config.position!r}.")
      if n in seen and seen[n][1] != fields:
        raise ValueError(f"train.phases[{i}] sets {fields or 'no model fields'} but "
                         f"train.phases[{seen[n][0]}] at the same length {n} sets "
                         f"{seen[n][1] or 'none'}: phases of one length share one model.")
      seen.setdefault(n, (i, fields))
      if fields:
        train[n] = pretraining_model(self.model_config.replace(**fields), nsp=self.nsp)
        evals[n] = pretraining_model(self.model_config.replace(deterministic=True, **fields),
                                     nsp=self.nsp)
    return train, evals

  # ------------------------------------------------------------------- data
  def phase_data_config(self, phase: dict) -> ml_collections.ConfigDict:
    """config.data with the phase's sequence length and prediction count."""
    cfg = ml_collections.ConfigDict(self.config.data.to_dict())
    for key in ("max_seq_length", "max_predictions_per_seq"):
      if key in phase:
        cfg[key] = phase[key]
    return cfg

  def phase_shapes(self, phase: dict) -> dict:
    cfg = self.phase_data_config(phase)
    return {"seq_len": cfg.max_seq_length, "num_predictions": cfg.max_predictions_per_seq}

  def prepare(self, workdir: str) -> None:
    """Prepares (or reuses) the instances of every phase. On a pod process 0 prepares and
    the others read what it names (never a vocabulary of their own): data/hosts.py."""
    from bert_jax.data import hosts  # pylint: disable=g-import-not-at-top
    from bert_jax.data import prepare as prepare_lib  # pylint: disable=g-import-not-at-top
    from bert_jax.data import prepared_data  # pylint: disable=g-import-not-at-top
    del workdir
    self._prepared = {}
    for i, phase in enumerate(self.config.train.get("phases") or [{}]):
      phase = dict(phase)
      cfg = self.phase_data_config(phase)
      if cfg.max_seq_length in self._prepared:  # a batch warmup's stages: one length's rows
        continue
      # The key names the call, not the config: host-local fields (cache_dir) may differ.
      self._prepared[cfg.max_seq_length] = hosts.prepare_once(
          f"bert/phase{i}/seq{cfg.max_seq_length}",
          lead=lambda cfg=cfg: prepare_lib.prepare_named(cfg),
          follow=lambda name, cfg=cfg: prepared_data.open_prepared(cfg, name),
          timeout_s=cfg.get("prepare_timeout", hosts.DEFAULT_TIMEOUT_S))
    first = next(iter(self._prepared.values()))
    self.tokenizer_dir = os.path.dirname(first.vocab_path)
    if first.vocab_size > self.model_config.vocab_size:
      raise ValueError(f"the vocabulary has {first.vocab_size} tokens but the model's "
                       f"vocab_size is {self.model_config.vocab_size}; set "
                       "config.model.vocab_size accordingly.")

  def steps_per_epoch(self, batch_size: int) -> int:
    """Steps of one pass over the first phase's train instances (train.num_epochs)."""
    return max(1, -(-next(iter(self._prepared.values())).num_examples["train"] // batch_size))

  def train_iterator(self, phase: dict, batch_size: int, shard_index: int, shard_count: int,
                     seed: int):
    from bert_jax.data import loader  # pylint: disable=g-import-not-at-top
    cfg = self.phase_data_config(phase)
    return loader.make_train_iterator(cfg, self._prepared[cfg.max_seq_length], batch_size,
                                      seed, shard_index, shard_count,
                                      start=int(phase.get("stream_start", 0)))

  def eval_iterator(self, phase: dict, batch_size: int, shard_index: int, shard_count: int):
    from bert_jax.data import loader  # pylint: disable=g-import-not-at-top
    cfg = self.phase_data_config(phase)
    return loader.make_eval_iterator(cfg, self._prepared[cfg.max_seq_length], batch_size,
                                     None, shard_index, shard_count)

  def load_pretrained_params(self, path: str, template):
    """Params from an HF BERT directory or one of our checkpoints, checked against ours."""
    from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
    from bert_jax.checkpoint import pretrained
    source, _, _ = pretrained.load_encoder(path, with_params=False)
    changed = [f"model.{k}={getattr(source, a)!r} (this run: {getattr(self.model_config, a)!r})"
               for k, a in _SIZE_FIELDS if getattr(source, a) != getattr(self.model_config, a)]
    if changed:  # one line, not the shape check's listing of every array
      raise checkpoint.CheckpointMismatchError(
          f"config.init_from {path} is a model of another size: {', '.join(changed)}. Set "
          "these --config.model.* (the vocabulary: data.vocab_path to its vocab) or start "
          "from a checkpoint of this run's size.")
    params = pretrained.load_pretraining_params(path, nsp=self.nsp)
    if self.model_config.scan_layers:
      params = unrolled_to_scan(params)
    params = checkpoint.pad_vocab_rows(params, template)
    checkpoint.check_compatible(params, template, path)
    return params

  # ------------------------------------------------------------------ model
  def dummy_batch(self, batch_size: int, seq_len: int, num_predictions: int) -> dict:
    ids = np.zeros((batch_size, seq_len), np.int32)
    batch = dict(input_ids=ids, input_mask=np.ones_like(ids), segment_ids=ids,
                 masked_lm_positions=np.zeros((batch_size, num_predictions), np.int32),
                 masked_lm_ids=np.zeros((batch_size, num_predictions), np.int32),
                 masked_lm_weights=np.ones((batch_size, num_predictions), np.float32),
                 next_sentence_labels=np.zeros((batch_size,), np.int32))
    return batch

  def init(self, rng, batch):
    return self.model.init({"params": rng, "dropout": rng}, **self._inputs(batch))

  def _inputs(self, batch):
    inputs = dict(input_ids=batch["input_ids"], input_mask=batch["input_mask"],
                  segment_ids=batch["segment_ids"],
                  masked_lm_positions=batch["masked_lm_positions"])
    if not self.nsp:  # packed rows: segment ids number the documents
      inputs["packed_segment_ids"] = batch["segment_ids"]
      inputs["segment_ids"] = None
      if "positions" in batch:
        inputs["positions"] = batch["positions"]
    return inputs

  def apply(self, params, batch, rng, train: bool):
    length = batch["input_ids"].shape[1]
    model = (self.phase_models.get(length, self.model) if train
             else self.eval_phase_models.get(length, self.eval_model))
    rngs = {"dropout": rng} if train else {}
    return model.apply({"params": params}, **self._inputs(batch), rngs=rngs)

  # ------------------------------------------------------------ loss terms
  def _example_weights(self, batch):
    w = batch.get("next_sentence_weights")  # 0 on eval padding rows
    return jnp.ones(batch["input_ids"].shape[:1], jnp.float32) if w is None else w

  def loss_weights(self, batch):
    weights = {"mlm": jnp.sum(batch["masked_lm_weights"].astype(jnp.float32))}
    if self.nsp:
      weights["nsp"] = jnp.sum(self._example_weights(batch))
    return weights

  def loss_parts(self, out, batch):
    parts = {"mlm": losses.softmax_cross_entropy(out["mlm_logits"], batch["masked_lm_ids"],
                                                 batch["masked_lm_weights"])}
    if self.nsp:
      parts["nsp"] = losses.softmax_cross_entropy(
          out["nsp_logits"], batch["next_sentence_labels"], self._example_weights(batch))
    return parts

  def metric_sums(self, out, batch):
    """Numerators and denominators; ratios are formed after summing over batches."""
    w = batch["masked_lm_weights"].astype(jnp.float32)
    sums = {"mlm_loss": self.loss_parts(out, batch)["mlm"], "mlm_weight": jnp.sum(w),
            "mlm_correct": losses.correct_count(out["mlm_logits"], batch["masked_lm_ids"], w)}
    if self.nsp:
      ew = self._example_weights(batch)
      sums.update(nsp_loss=losses.softmax_cross_entropy(
          out["nsp_logits"], batch["next_sentence_labels"], ew), nsp_weight=jnp.sum(ew),
          nsp_correct=losses.correct_count(out["nsp_logits"], batch["next_sentence_labels"], ew))
    return sums

  @staticmethod
  def metric_ratios(sums):
    ratios = {"mlm_loss": sums["mlm_loss"] / jnp.maximum(sums["mlm_weight"], 1e-9),
              "mlm_accuracy": sums["mlm_correct"] / jnp.maximum(sums["mlm_weight"], 1e-9)}
    if "nsp_weight" in sums:
      ratios["nsp_loss"] = sums["nsp_loss"] / jnp.maximum(sums["nsp_weight"], 1e-9)
      ratios["nsp_accuracy"] = sums["nsp_correct"] / jnp.maximum(sums["nsp_weight"], 1e-9)
    return ratios

  # ---------------------------------------------------------------- FLOPs
  def flops_per_example(self, seq_len: int, num_predictions: int) -> float:
    """Training FLOPs (forward + backward = 3x forward) of one example; matmuls only.

    The encoder's come from the model config; the heads add the pooler + NSP on [CLS]
    and the MLM transform + vocabulary projection at the P masked positions only.
    """
    c = self.model_config
    d, vocab = c.hidden_size, c.vocab_size
    heads = num_predictions * 2 * (d * d + d * vocab) + 2 * (d * d + 2 * d)
    return 3.0 * (seq_len * c.flops_per_token(seq_len) + heads)

