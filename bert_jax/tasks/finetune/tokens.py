"""Shared tokenizer plumbing for the featurizers: special ids, plain encoding, padding.

The featurizers take a fast `tokenizers.Tokenizer` (WordPiece, with offsets) from the
caller and do all truncation, special tokens and padding themselves, so that the
layouts (`[CLS] a [SEP] b [SEP]`, pair truncation, SQuAD windows) are exactly BERT's.
"""
from __future__ import annotations

from typing import Sequence

from absl import logging
import numpy as np
import tokenizers

from bert_jax.data.tokenizer import SpecialIds


def special_ids(tokenizer: tokenizers.Tokenizer) -> SpecialIds:
  """[PAD]/[UNK]/[CLS]/[SEP]/[MASK] ids from the vocabulary (never hard-coded)."""
  return SpecialIds.from_tokenizer(tokenizer, "the tokenizer vocabulary")


def plain(tokenizer: tokenizers.Tokenizer) -> tokenizers.Tokenizer:
  """The tokenizer itself, or a copy without truncation/padding if it had them.

  A tokenizer.json saved from a pipeline often carries `truncation`/`padding`, which
  would silently cut or pad every text before our own layout logic sees it. The
  caller's object is not modified.
  """
  if tokenizer.truncation is None and tokenizer.padding is None:
    return tokenizer
  logging.info("Copying the tokenizer without its truncation/padding settings.")
  copy = tokenizers.Tokenizer.from_str(tokenizer.to_str())
  copy.no_truncation()
  copy.no_padding()
  return copy


def pad_rows(rows: Sequence[Sequence[int]], length: int, value: int = 0,
             dtype=np.int32) -> np.ndarray:
  """[N] ragged rows (each <= length) -> [N, length] array, right-padded with `value`."""
  out = np.full((len(rows), length), value, dtype=dtype)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out
