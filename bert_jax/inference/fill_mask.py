"""Fill-mask: the top-k tokens (with probabilities) the MLM head predicts for each [MASK].

Each text is "[CLS] text [SEP]" unless it starts with [CLS] (inputs.bert_inputs). Several
texts run together (`fill_many`): sorted by length into buckets of LENGTH_BUCKET tokens,
batched per bucket, answered in the caller's order; each text's probabilities are those
of a forward pass of it alone (padding is masked out), to float rounding. The fill_mask
command (bert_jax/apps/fill_mask.py), the demo report and `Model.fill_mask` (api.py) call
this.
"""
from __future__ import annotations

import functools
from typing import Sequence

import jax
import numpy as np

from bert_jax.data import buckets
from bert_jax.inference import loader
from bert_jax.inference.inputs import bert_inputs
from bert_jax.inference.loader import InputError
from bert_jax.layers.config import TransformerConfig
from bert_jax.models.registry import pretraining_model

# fill_many pads each batch to the multiple of LENGTH_BUCKET tokens holding its longest text
# (one compiled shape per bucket, rows and [MASK] slots rounded up to powers of two).
LENGTH_BUCKET = 32


@functools.partial(jax.jit, static_argnames=("config",))
def _mlm_logits(params, ids, mask, segments, positions, *, config):
  return pretraining_model(config, nsp=False).apply(   # BERT's or ModernBERT's
      {"params": params}, ids, mask, segments, positions)["mlm_logits"]  # [batch, P, vocab]


def mask_probabilities(config: TransformerConfig, params: dict, ids, positions,
                       mask=None, segment_ids=None) -> np.ndarray:
  """ids [batch, len], positions [batch, P] -> softmax over the vocabulary [batch, P, V]."""
  if config.family == "modernbert":  # ModernBertForMaskedLM's own tree
    tree = params
  else:
    bert = {k: v for k, v in params["bert"].items() if k != "pooler"}  # nsp=False: no pooler
    tree = {"bert": bert, "mlm_head": params["mlm_head"]}
  ids = np.asarray(ids, np.int32)
  mask = np.ones_like(ids) if mask is None else np.asarray(mask, np.int32)
  segment_ids = np.zeros_like(ids) if segment_ids is None else np.asarray(segment_ids, np.int32)
  with jax.default_matmul_precision("float32"):
    logits = _mlm_logits(tree, ids, mask, segment_ids, np.asarray(positions, np.int32),
                         config=config.replace(deterministic=True))
  return np.asarray(jax.nn.softmax(logits, axis=-1))


def check_mlm_head(model: loader.Loaded, what: str = "--checkpoint") -> None:
  """InputError unless `model` is a BERT with its MLM head (what fill-mask needs)."""
  if model.kind != "bert" or not model.has_mlm_head:
    raise InputError(f"{what} {model.source} has no MLM head (a {model.kind} "
                     f"{'encoder-only ' if model.kind == 'bert' else ''}checkpoint, task "
                     f"{model.task}); fill-mask needs a pretraining checkpoint (our "
                     "bert_pretraining workdir, or an HF BertForPreTraining / BertForMaskedLM "
                     "/ ModernBertForMaskedLM directory)")


def _next_pow2(n: int) -> int:
  return 1 << max(0, int(n) - 1).bit_length()


def mask_probabilities_many(config: TransformerConfig, params: dict, ids: list, positions: list,
                            batch_size: int = 32) -> list[np.ndarray]:
  """Per text, in the given order: [P_i, V] softmax at its positions; ids[i] [len_i].

  Texts are sorted by length and batched within buckets of LENGTH_BUCKET tokens
  (buckets.bucket_lengths up to the model's positions); a batch has batch_size rows,
  or the power of two holding a bucket's last texts, and [MASK] slots for the most
  masks of any text, rounded up to a power of two: at most two shapes a bucket used,
  each compiled once.
  """
  lengths = np.array([len(x) for x in ids], np.int64)
  of = buckets.bucket_of(lengths, buckets.bucket_lengths(config.max_len, LENGTH_BUCKET))
  slots = _next_pow2(max((len(p) for p in positions), default=1))   # one for the call
  out: list = [None] * len(ids)
  order = np.argsort(lengths, kind="stable")
  for length in np.unique(of):
    members = order[of[order] == length]
    for at in range(0, len(members), batch_size):
      chunk = members[at:at + batch_size]
      rows = batch_size if len(chunk) == batch_size else min(batch_size,
                                                               _next_pow2(len(chunk)))
      tokens = np.zeros((rows, length), np.int32)           # [rows, bucket length]
      mask = np.zeros_like(tokens)
      where = np.zeros((rows, slots), np.int32)             # [rows, mask slots]
      for r, i in enumerate(chunk):
        tokens[r, :lengths[i]], mask[r, :lengths[i]] = ids[i], 1
        where[r, :len(positions[i])] = positions[i]
      probs = mask_probabilities(config, params, tokens, where, mask)  # [rows, slots, V]
      for r, i in enumerate(chunk):
        out[i] = probs[r, :len(positions[i])]
  return out


def _masked_inputs(model: loader.Loaded, text: str) -> tuple[list[int], list[int]]:
  """(ids, [MASK] positions) of a text; InputError naming what is wrong with it."""
  mask_id = model.tokenizer.token_to_id("[MASK]")
  if mask_id is None:
    raise InputError(f"the vocabulary of {model.source} has no [MASK] token")
  ids, _, _ = bert_inputs(model.tokenizer, text)
  positions = [i for i, t in enumerate(ids) if t == mask_id]
  if not positions:
    raise InputError(f"no [MASK] in the text {text!r}")
  if len(ids) > model.config.max_len:
    raise InputError(f"the text has {len(ids)} tokens; this model takes at most "
                     f"{model.config.max_len}")
  return ids, positions


def fill_many(model: loader.Loaded, texts: Sequence[str], top_k: int,
              batch_size: int = 32) -> list[list[list[tuple[str, float]]]]:
  """fill() of each text, in the caller's order, the texts batched by length."""
  inputs = [_masked_inputs(model, text) for text in texts]
  probs = mask_probabilities_many(model.config, model.params, [x[0] for x in inputs],
                                  [x[1] for x in inputs], batch_size)
  word = _word_of(model.tokenizer)
  # ModernBERT's table has rows past its tokenizer's ids (50,368 for 50,280 tokens): never
  # an answer, as no text holds them.
  known = model.tokenizer.get_vocab_size(with_added_tokens=True)
  out = []
  for p in probs:  # [P, V] each
    best = np.argsort(-p[:, :known], axis=-1, kind="stable")[:, :top_k]
    out.append([[(word(int(i)), float(row[i])) for i in b] for row, b in zip(p, best)])
  return out


def _word_of(tokenizer):
  """id -> the answer's text: a WordPiece token as it is ("##ing", as BERT users read
  them), a byte-level BPE token decoded ("Ġcapital" -> "capital", ModernBERT's)."""
  from tokenizers import models  # pylint: disable=g-import-not-at-top
  if isinstance(tokenizer.model, models.WordPiece):
    return tokenizer.id_to_token
  return lambda i: tokenizer.decode([i], skip_special_tokens=False).strip()


def fill(model: loader.Loaded, text: str, top_k: int) -> list[list[tuple[str, float]]]:
  """Per [MASK] in the text, in order: the top_k (token, probability)."""
  return fill_many(model, [text], top_k)[0]
