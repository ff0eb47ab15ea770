"""The MLM model of each encoder family (TransformerConfig.family), for the tasks that
train or read one: BERT's (MLM + NSP heads) or ModernBERT's (MLM only)."""
from __future__ import annotations

from bert_jax.layers.config import TransformerConfig
from bert_jax.models.bert import BertForPreTraining
from bert_jax.models.modernbert import ModernBertForMaskedLM


def pretraining_model(config: TransformerConfig, nsp: bool):
  """The family's pretraining model; `nsp` adds BERT's next-sentence head (ModernBERT
  has none: its model refuses nsp=True with a message naming data.mode)."""
  if config.family == "modernbert":
    return ModernBertForMaskedLM(config, nsp=nsp)
  return BertForPreTraining(config, nsp=nsp)
