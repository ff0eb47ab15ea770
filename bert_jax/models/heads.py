"""Fine-tuning heads on BertModel: sequence classification/regression, tokens, spans.

The encoder sits under the name `bert`, as in BertForPreTraining and in Hugging Face
checkpoints, so pretrained encoders (ours or HF's) drop in as `params["bert"]` and only
the small head is freshly initialized. Head layouts follow google-research/bert
(run_classifier.py: dropout on the pooled [CLS] vector, then one dense layer;
run_squad.py: one dense layer to (start, end) logits over every token).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.layers.config import TransformerConfig
from bert_jax.models.bert import BertModel

Array = jax.Array
# The span logits of padding positions: no loss or n-best search picks them.
PADDING_LOGIT = -1e9


def _dense(cfg: TransformerConfig, features: int, name: str) -> nn.Dense:
  return nn.Dense(features, dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                  kernel_init=cfg.kernel_init("embed", "classes"),
                  bias_init=cfg.zeros_init("classes"), name=name)


class BertForSequenceClassification(nn.Module):
  """Pooled vector -> dropout -> dense: `logits` [batch, num_labels] (1 for regression).

  pooling "cls": BERT's tanh pooler on [CLS] (google-research/bert, HF); "mean": the
  average of the real tokens' final states, the pooling sentence-transformers models
  (e.g. all-MiniLM-L6-v2) were trained with, so their embedding space is used as is.
  """
  config: TransformerConfig
  num_labels: int
  pooling: str = "cls"

  @nn.compact
  def __call__(self, input_ids: Array, input_mask: Array | None = None,
               segment_ids: Array | None = None, positions: Array | None = None,
               packed_segment_ids: Array | None = None,
               example_starts: Array | None = None) -> dict:
    """Padded rows (one example a row): logits [batch, num_labels]. Packed rows
    (tasks/finetune/packing.py; positions, packed_segment_ids and example_starts
    [batch * K], the [CLS] of each of a row's K example slots): one pooled vector per
    slot, logits [batch * K, num_labels] (empty slots give the bias)."""
    cfg = self.config
    if self.pooling not in ("cls", "mean"):
      raise ValueError(f"pooling={self.pooling!r}; expected 'cls' or 'mean'.")
    packed = example_starts is not None
    starts = example_starts.reshape(input_ids.shape[0], -1) if packed else None  # [b, K]
    out = BertModel(cfg, add_pooler=self.pooling == "cls", name="bert")(
        input_ids, input_mask, segment_ids, positions, packed_segment_ids,
        pool_positions=starts)
    if self.pooling == "cls":
      pooled = out["pooled_output"]                            # [batch(, K), hidden]
    elif packed:
      # Slot k's tokens are those of segment k + 1: their mean, as a one-hot matmul
      # (HIGHEST: a selection must not round the hidden states on TPU/GPU).
      slots = jnp.arange(1, starts.shape[1] + 1)
      member = (packed_segment_ids[:, None, :] == slots[None, :, None])  # [b, K, len]
      member = member.astype(out["sequence_output"].dtype)
      total = jnp.einsum("bkl,bld->bkd", member, out["sequence_output"],
                         precision=jax.lax.Precision.HIGHEST)
      pooled = total / jnp.maximum(jnp.sum(member, -1), 1)[..., None]   # [b, K, hidden]
    else:
      mask = (jnp.ones_like(input_ids) if input_mask is None else input_mask)[..., None]
      mask = mask.astype(out["sequence_output"].dtype)         # [batch, len, 1]
      pooled = jnp.sum(out["sequence_output"] * mask, 1) / jnp.maximum(jnp.sum(mask, 1), 1)
    if packed:
      pooled = pooled.reshape(-1, pooled.shape[-1])           # [batch * K, hidden]
    x = nn.Dropout(cfg.dropout_rate, deterministic=cfg.deterministic)(pooled)
    logits = _dense(cfg, self.num_labels, "classifier")(x)    # [examples, num_labels]
    return {"logits": logits.astype(jnp.float32)}


class BertForTokenClassification(nn.Module):
  """Every token -> dropout -> dense: `logits` [batch, len, num_labels] (NER tags)."""
  config: TransformerConfig
  num_labels: int

  @nn.compact
  def __call__(self, input_ids: Array, input_mask: Array | None = None,
               segment_ids: Array | None = None, positions: Array | None = None,
               packed_segment_ids: Array | None = None) -> dict:
    """positions and packed_segment_ids: packed rows (tasks/finetune/packing.py)."""
    cfg = self.config
    out = BertModel(cfg, add_pooler=False, name="bert")(input_ids, input_mask, segment_ids,
                                                         positions, packed_segment_ids)
    x = nn.Dropout(cfg.dropout_rate, deterministic=cfg.deterministic)(out["sequence_output"])
    logits = _dense(cfg, self.num_labels, "classifier")(x)    # [batch, len, num_labels]
    return {"logits": logits.astype(jnp.float32)}


class BertForQuestionAnswering(nn.Module):
  """Every token -> dense(2): `start_logits`, `end_logits` [batch, len].

  Padding positions get a large negative logit, so neither the loss nor the n-best
  search can pick them (the context tokens are chosen among on the host).
  """
  config: TransformerConfig

  @nn.compact
  def __call__(self, input_ids: Array, input_mask: Array | None = None,
               segment_ids: Array | None = None) -> dict:
    cfg = self.config
    out = BertModel(cfg, add_pooler=False, name="bert")(input_ids, input_mask, segment_ids)
    logits = _dense(cfg, 2, "qa_outputs")(out["sequence_output"]).astype(jnp.float32)
    if input_mask is not None:                                # [batch, len, 2]
      logits = jnp.where(input_mask[..., None] > 0, logits, PADDING_LOGIT)
    return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
