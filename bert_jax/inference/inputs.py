"""A text as BERT takes it: "[CLS] a [SEP] (b [SEP])" ids, segment ids and tokens.

Shared by fill-mask and the pictures so that a [MASK] filled and an attention matrix drawn
for the same text see the same tokens.
"""
from __future__ import annotations

from typing import Optional


def plain_tokens(tokenizer, text: str) -> tuple[list[int], list[str]]:
  """(ids, tokens) of a text, no special tokens added."""
  enc = tokenizer.encode(text, add_special_tokens=False)
  return list(enc.ids), list(enc.tokens)


def bert_inputs(tokenizer, text: str, text_b: Optional[str] = None):
  """(ids, segment ids, tokens). "[CLS] a [SEP] (b [SEP])", unless the text already starts
  with [CLS]: then it is taken exactly as written (e.g. a 10-token "[CLS] Before my bed
  lies a pool of moon bright" gives a 10 x 10 matrix), text_b appended as "b [SEP]"."""
  ids, tokens = plain_tokens(tokenizer, text)
  cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
  if not (ids and ids[0] == cls_id):
    ids, tokens = [cls_id, *ids, sep_id], ["[CLS]", *tokens, "[SEP]"]
  segments = [0] * len(ids)
  if text_b:
    b_ids, b_tokens = plain_tokens(tokenizer, text_b)
    ids, tokens = ids + b_ids + [sep_id], tokens + b_tokens + ["[SEP]"]
    segments += [1] * (len(b_ids) + 1)
  return ids, segments, tokens
