"""The BERT pretraining task: MLM (+ NSP) on BertForPreTraining.

A task tells the shared train/eval steps how to run its model and which loss and
metric terms it has; the steps own the mechanics (see bert_jax/train/steps.py).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from bert_jax.models.bert import BertForPreTraining
from bert_jax.models.variants import get_model_config
from bert_jax.train import losses


def model_config_from(config: ml_collections.ConfigDict):
  """TransformerConfig of `config.model`: a named variant plus field overrides."""
  overrides = {k: v for k, v in config.model.items() if k != "variant"}
  return get_model_config(config.model.variant, **overrides)


class PretrainingTask:
  """MLM + NSP (google-research/bert) or MLM only (RoBERTa-style packed rows)."""

  name = "bert_pretraining"

  def __init__(self, config: ml_collections.ConfigDict):
    self.config = config
    self.nsp = config.data.mode == "nsp"
    self.model_config = model_config_from(config)
    self.model = BertForPreTraining(self.model_config, nsp=self.nsp)
    self.eval_model = BertForPreTraining(self.model_config.replace(deterministic=True),
                                         nsp=self.nsp)

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
    model = self.model if train else self.eval_model
    rngs = {"dropout": rng} if train else {}
    return model.apply({"params": params}, **self._inputs(batch), rngs=rngs)

  # ------------------------------------------------------------ loss terms
  def _example_weights(self, batch):
    w = batch.get("example_weights")
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
    """Model FLOPs (forward + backward = 3x forward) of one example; matmuls only.

    Per layer: QKV + output projections 4·d², FFN 2·d·f, per token; attention scores and
    the weighted sum 2·T·d per token. Heads: pooler + NSP on [CLS], MLM transform and the
    vocabulary projection at the P masked positions only. A multiply-add is 2 FLOPs.
    """
    c = self.model_config
    d, f, layers, vocab = c.hidden_size, c.d_mlp, c.num_layers, c.vocab_size
    attn_width = c.num_heads * c.d_head
    per_token = layers * (2 * (3 * d * attn_width + attn_width * d) + 2 * 2 * d * f
                          + 2 * 2 * seq_len * attn_width)
    heads = num_predictions * 2 * (d * d + d * vocab) + 2 * (d * d + 2 * d)
    return 3.0 * (seq_len * per_token + heads)
