"""The causal language-modelling task (`lm`): GPT on packed documents, on the shared loop.

Loss: next-token cross-entropy over every real target. Eval on held-out documents:
loss (nats per token), perplexity exp(loss), accuracy and bits per byte
(Σ NLL / ln 2 / Σ UTF-8 bytes of the targets, see data.py).
"""
from __future__ import annotations

import math
import os

import jax.numpy as jnp
import ml_collections
import numpy as np

from bert_jax.models.gpt import GPT
from bert_jax.train import losses
from bert_jax.train.defaults import transformer_config


class LmTask:
  """GPT trained to predict the next token of packed documents."""

  name = "lm"
  host_scored = False
  summary_keys = ("loss", "perplexity", "accuracy")
  progress_labels = (("perplexity", "ppl"), ("accuracy", "acc"))

  def __init__(self, config: ml_collections.ConfigDict):
    self.config = config
    self.tokenizer_dir = None  # set by prepare(): the directory of tokenizer.json
    self.data = None
    self.model_config = transformer_config(config)
    self.model = GPT(self.model_config)
    self.eval_model = GPT(self.model_config.replace(deterministic=True))

  # ------------------------------------------------------------------- data
  def _seq_len(self, phase: dict) -> int:
    return int(phase.get("max_seq_length", self.config.data.max_seq_length))

  def phase_shapes(self, phase: dict) -> dict:
    return {"seq_len": self._seq_len(phase), "num_predictions": 0}

  def prepare(self, workdir: str) -> None:
    from bert_jax.tasks.lm import data as data_lib  # pylint: disable=g-import-not-at-top
    from bert_jax.data import hosts  # pylint: disable=g-import-not-at-top
    del workdir
    for phase in self.config.train.get("phases") or [{}]:
      if self._seq_len(dict(phase)) > self.model_config.max_len:
        raise ValueError(f"max_seq_length {self._seq_len(dict(phase))} exceeds the model's "
                         f"max_len {self.model_config.max_len} (its position table).")
    # Process 0 first, and its trained BPE travels to the others, which build their
    # documents and streams (deterministic given the tokenizer) on their own disks but
    # never train a BPE (data.shared_tokenizer says why).
    cfg = self.config.data

    def lead():
      data = data_lib.prepare(cfg)
      return data, data_lib.shared_tokenizer(cfg, data)
    self.data = hosts.prepare_once(
        "lm", lead=lead, follow=lambda shared: data_lib.prepare(cfg, shared=shared),
        timeout_s=cfg.get("prepare_timeout", hosts.DEFAULT_TIMEOUT_S))
    self.tokenizer_dir = os.path.dirname(self.data.tokenizer_path)
    if self.data.vocab_size > self.model_config.vocab_size:
      raise ValueError(f"the tokenizer has {self.data.vocab_size} tokens but the model's "
                       f"vocab_size is {self.model_config.vocab_size}; set "
                       "config.model.vocab_size accordingly.")

  def steps_per_epoch(self, batch_size: int) -> int:
    from bert_jax.tasks.lm import data as data_lib  # pylint: disable=g-import-not-at-top
    rows = data_lib.num_rows(self.data.stats["train"]["tokens"],
                             self.config.data.max_seq_length, full_only=True)
    return max(1, rows // batch_size)

  def train_iterator(self, phase: dict, batch_size: int, shard_index: int, shard_count: int,
                     seed: int):
    from bert_jax.tasks.lm import data as data_lib  # pylint: disable=g-import-not-at-top
    return data_lib.train_iterator(self.config.data, self.data, batch_size, shard_index,
                                   shard_count, seed, self._seq_len(phase))

  def eval_iterator(self, phase: dict, batch_size: int, shard_index: int, shard_count: int):
    from bert_jax.tasks.lm import data as data_lib  # pylint: disable=g-import-not-at-top
    return data_lib.eval_iterator(self.config.data, self.data, batch_size, shard_index,
                                  shard_count, self._seq_len(phase))

  def load_pretrained_params(self, path: str, template):
    """Params from a Hugging Face GPT-2 directory or one of our checkpoints."""
    from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
    from bert_jax.layers.param_layout import scan_to_unrolled, unrolled_to_scan  # pylint: disable=g-import-not-at-top
    if os.path.exists(os.path.join(path, "config.json")):
      from bert_jax.interop import gpt2  # pylint: disable=g-import-not-at-top
      _, params = gpt2.load_gpt2(path, scan_layers=self.model_config.scan_layers)
    else:
      params = checkpoint.load_task_params(path, "lm", "a GPT",
                                           " or a Hugging Face GPT-2 directory")
      convert = unrolled_to_scan if self.model_config.scan_layers else scan_to_unrolled
      params = convert(params)
    params = checkpoint.pad_vocab_rows(params, template)
    checkpoint.check_compatible(params, template, path)
    return params

  # ------------------------------------------------------------------ model
  def dummy_batch(self, batch_size: int, seq_len: int, num_predictions: int) -> dict:
    del num_predictions
    ids = np.zeros((batch_size, seq_len), np.int32)
    return dict(input_ids=ids, targets=ids, weights=np.ones(ids.shape, np.float32),
                segment_ids=np.ones_like(ids), positions=np.broadcast_to(
                    np.arange(seq_len, dtype=np.int32), ids.shape).copy(),
                target_bytes=np.ones(ids.shape, np.float32))

  def init(self, rng, batch):
    return self.model.init({"params": rng, "dropout": rng}, batch["input_ids"],
                           positions=batch["positions"],
                           packed_segment_ids=batch["segment_ids"])

  def apply(self, params, batch, rng, train: bool):
    model = self.model if train else self.eval_model
    rngs = {"dropout": rng} if train else {}
    logits = model.apply({"params": params}, batch["input_ids"], positions=batch["positions"],
                         packed_segment_ids=batch["segment_ids"], rngs=rngs)
    return {"logits": logits}                                   # [B, L, vocab] float32

  # ------------------------------------------------------------ loss terms
  def loss_weights(self, batch):
    return {"lm": jnp.sum(batch["weights"].astype(jnp.float32))}

  def loss_parts(self, out, batch):
    return {"lm": losses.softmax_cross_entropy(out["logits"], batch["targets"],
                                               batch["weights"])}

  def metric_sums(self, out, batch):
    w = batch["weights"].astype(jnp.float32)
    return {"nll": self.loss_parts(out, batch)["lm"], "tokens": jnp.sum(w),
            "correct": losses.correct_count(out["logits"], batch["targets"], w),
            "bytes": jnp.sum(batch["target_bytes"].astype(jnp.float32))}

  @staticmethod
  def metric_ratios(sums):
    loss = sums["nll"] / jnp.maximum(sums["tokens"], 1e-9)
    return {"loss": loss, "perplexity": jnp.exp(loss),
            "accuracy": sums["correct"] / jnp.maximum(sums["tokens"], 1e-9),
            "bits_per_byte": sums["nll"] / math.log(2) / jnp.maximum(sums["bytes"], 1e-9)}

  # ---------------------------------------------------------------- FLOPs
  def flops_per_example(self, seq_len: int, num_predictions: int) -> float:
    """Training FLOPs (3x forward, matmuls only): the blocks + the vocabulary projection."""
    del num_predictions
    c = self.model_config
    return 3.0 * seq_len * (c.flops_per_token(seq_len) + 2 * c.hidden_size * c.vocab_size)
