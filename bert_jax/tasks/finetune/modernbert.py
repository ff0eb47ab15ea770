"""Fine-tuning a ModernBERT encoder (models/modernbert.py): what differs from BERT's.

`init_from` a transformers ModernBERT directory (interop/modernbert.py) or one of our
ModernBERT workdirs gives TransformerConfig.family "modernbert"; the classification and
NER tasks then build transformers' ModernBertForSequenceClassification /
ModernBertForTokenClassification: the encoder under `model`, the prediction head `head`
(the source's when it has one, as transformers' from_pretrained does), a fresh
`classifier`. apps/export.py saves them as those classes. The tokenizer is the source's
(byte-level BPE, [CLS] a [SEP] b [SEP] as BERT's layout); segment ids reach the model and
are ignored (no token types). Packed rows work as for BERT (pool_slots). SQuAD is
refused (no span head on ModernBertModel here).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.data import tokenizer as tokenizer_lib
from bert_jax.interop import modernbert as interop
from bert_jax.layers.config import TransformerConfig
from bert_jax.runtime import paths

FAMILY = "modernbert"


def is_modernbert(model_config: TransformerConfig) -> bool:
  return model_config.family == FAMILY


def run_config(model_config: TransformerConfig, config) -> TransformerConfig:
  """The run's encoder config: a ModernBERT's classifier pools as config.pooling says (the
  checkpoint's classifier_pooling is replaced, and an export writes the run's), its
  layers unrolled unless model.scan_layers=true asks otherwise (the model refuses it)."""
  if not is_modernbert(model_config):
    return model_config
  scan = config.model.get("scan_layers") if "model" in config else None  # None: per platform
  return model_config.replace(pooling=config.get("pooling", "cls"), scan_layers=bool(scan))


def load_vocab(vocab: str, family: str | None):
  """config.data.vocab's tokenizer (predict mode: the workdir's copy): BERT's WordPiece
  (data/tokenizer.py), or for a ModernBERT a directory's / tokenizer.json's byte-level BPE
  as interop reads it (WordPiece there goes to data/tokenizer.py too)."""
  where = paths.resolve(vocab) if family == FAMILY else None
  if where is None or not (where.is_dir() or where.name == "tokenizer.json"):
    return tokenizer_lib.load_tokenizer(vocab)
  return interop.load_tokenizer(str(where if where.is_dir() else where.parent))


def load_pretrained_params(path: str, template: dict) -> dict:
  """The template (fresh head and classifier) with path's ModernBertModel under `model`
  and its prediction head under `head` when it has one, in the template's dtypes."""
  from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoint import pretrained  # pylint: disable=g-import-not-at-top
  encoder, head = pretrained.load_modernbert_trees(path)
  loaded = dict(template, model=encoder)
  if head is not None and "head" in template:
    loaded["head"] = head
  checkpoint.check_compatible(loaded, template, f"{path} (ModernBERT encoder)")
  return jax.tree_util.tree_map(lambda x, t: jnp.asarray(np.asarray(x), t.dtype), loaded,
                                template)


def refuse_squad(model_config: TransformerConfig) -> None:
  if is_modernbert(model_config):
    raise ValueError("squad: ModernBERT has no span head here; fine-tune a BERT encoder "
                     "(config.init_from) for SQuAD, or use the classification / NER tasks.")
