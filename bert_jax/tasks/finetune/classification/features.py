"""Sequence classification / regression featurization (GLUE-style, sentiment, ...).

An example is one text or a pair; its features are BERT's layout

    [CLS] a_1 .. a_n [SEP]                   segment 0 0 .. 0 0
    [CLS] a_1 .. a_n [SEP] b_1 .. b_m [SEP]  segment 0 0 .. 0 0 1 .. 1 1

padded to `max_seq_length`, with pairs truncated longest-first as in google-research/
bert's `_truncate_seq_pair`. Labels go through a label list (str or int labels; the id
is the position in the list) or, for regression, become float32.

Feature dict (N = kept examples, L = max_seq_length):
  input_ids     int32   [N, L]  token ids, [PAD] after the last [SEP]
  input_mask    int32   [N, L]  1 on real tokens, 0 on padding
  segment_ids   int32   [N, L]  0 for [CLS] a [SEP], 1 for b [SEP], 0 on padding
  labels        int32   [N]     label ids (-1 = unlabeled, only if allow_unlabeled)
                float32 [N]     for regression (NaN = unlabeled)
  example_index int32   [N]     position of the source example in the input sequence
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence, Union

from absl import logging
import numpy as np
import tokenizers

from bert_jax.tasks.finetune import tokens as tok_lib
from bert_jax.tasks.skiplog import SkipLog

Label = Union[str, int, float, None]


@dataclasses.dataclass(frozen=True)
class ClassificationExample:
  text_a: str
  text_b: Optional[str] = None  # None: single-sentence task
  label: Label = None  # None: unlabeled (e.g. a GLUE test split)
  guid: str = ""  # where it came from (file:line, tfds idx), for messages


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> bool:
  """Pops from the end of the longer list (b on ties) until both fit; True if cut.

  Longest-first keeps as much of the shorter text as possible, which matters when a
  short hypothesis is paired with a long premise.
  """
  truncated = False
  while len(tokens_a) + len(tokens_b) > max_length:
    truncated = True
    (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()
  return truncated


def make_label_map(label_list: Sequence) -> dict:
  """label -> id, also keyed by str(label) so that "1" from a CSV finds int label 1."""
  mapping = {}
  for i, label in enumerate(label_list):
    if label in mapping:
      raise ValueError(f"Duplicate label {label!r} in label_list {list(label_list)}.")
    mapping[label] = i
  for label, i in list(mapping.items()):
    mapping.setdefault(str(label), i)
  return mapping


def _label_id(label, mapping):
  if isinstance(label, np.generic):
    label = label.item()
  if isinstance(label, bytes):
    label = label.decode("utf-8")
  if label in mapping:
    return mapping[label]
  return mapping.get(str(label).strip())


def _regression_value(label) -> Optional[float]:
  try:
    value = float(label)
  except (TypeError, ValueError):
    return None
  return value if math.isfinite(value) else None


def featurize_classification(
    examples: Sequence[ClassificationExample],
    tokenizer: tokenizers.Tokenizer,
    max_seq_length: int,
    label_list: Optional[Sequence] = None,
    regression: bool = False,
    allow_unlabeled: bool = False,
    source: str = "classification",
) -> tuple[dict[str, np.ndarray], SkipLog]:
  """Tokenizes, truncates, lays out and pads; skips (and counts) what it cannot use.

  Args:
    examples: the examples; `text_b` None for single-sentence tasks.
    tokenizer: a fast WordPiece tokenizer with [CLS]/[SEP]/[PAD] in its vocabulary.
    max_seq_length: L, including the special tokens (>= 3 for pairs, >= 2 otherwise).
    label_list: the classes in id order (required unless `regression`).
    regression: float labels (STS-B); `label_list` is then ignored.
    allow_unlabeled: keep examples without a label (label -1 / NaN) instead of
      skipping them; for predicting on test splits.
    source: name used in warnings and the summary.

  Returns:
    (features as described in the module docstring, SkipLog). Skip reasons: empty_text,
    empty_text_b, no_tokens, missing_label, label_not_in_label_list,
    bad_regression_label. Note: truncated.
  """
  if not regression and label_list is None:
    raise ValueError("Classification needs a label_list (or regression=True).")
  if max_seq_length < 3:
    raise ValueError(f"max_seq_length={max_seq_length} leaves no room for text.")
  mapping = None if regression else make_label_map(label_list)
  special = tok_lib.special_ids(tokenizer)
  tokenizer = tok_lib.plain(tokenizer)
  log = SkipLog(source)

  # 1) Text checks first, so that only usable texts reach the tokenizer.
  usable = []
  for i, ex in enumerate(examples):
    where = ex.guid or i
    if not isinstance(ex.text_a, str) or not ex.text_a.strip():
      log.skip("empty_text", where, f"text_a={ex.text_a!r}")
    elif ex.text_b is not None and (not isinstance(ex.text_b, str) or not ex.text_b.strip()):
      log.skip("empty_text_b", where, f"text_b={ex.text_b!r}")
    else:
      usable.append(i)
  texts_a = [examples[i].text_a for i in usable]
  pairs = [(i, examples[i].text_b) for i in usable if examples[i].text_b is not None]
  enc_a = tokenizer.encode_batch(texts_a, add_special_tokens=False)
  enc_b = dict(zip([i for i, _ in pairs],
                   tokenizer.encode_batch([t for _, t in pairs], add_special_tokens=False)))

  rows_ids, rows_seg, labels, index = [], [], [], []
  for i, ea in zip(usable, enc_a):
    ex, where = examples[i], examples[i].guid or i
    a = list(ea.ids)
    b = list(enc_b[i].ids) if i in enc_b else None
    if not a or (b is not None and not b):
      log.skip("no_tokens", where, "a text has no tokens after normalization")
      continue
    # 2) Label: mapped, or the example is skipped (never a guessed label).
    if ex.label is None or (isinstance(ex.label, str) and not ex.label.strip()):
      if not allow_unlabeled:
        log.skip("missing_label", where)
        continue
      label = float("nan") if regression else -1
    elif regression:
      label = _regression_value(ex.label)
      if label is None:
        log.skip("bad_regression_label", where, f"label={ex.label!r}")
        continue
    else:
      label = _label_id(ex.label, mapping)
      if label is None:
        log.skip("label_not_in_label_list", where,
                 f"label={ex.label!r} not in {list(label_list)}")
        continue
    # 3) Truncation and layout.
    if b is None:
      truncated = len(a) > max_seq_length - 2
      a = a[:max_seq_length - 2]
      ids = [special.cls] + a + [special.sep]
      seg = [0] * len(ids)
    else:
      truncated = truncate_seq_pair(a, b, max_seq_length - 3)
      ids = [special.cls] + a + [special.sep] + b + [special.sep]
      seg = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    if truncated:
      log.note("truncated", where)
    rows_ids.append(ids)
    rows_seg.append(seg)
    labels.append(label)
    index.append(i)

  log.kept = len(index)
  features = {
      "input_ids": tok_lib.pad_rows(rows_ids, max_seq_length, special.pad),
      "input_mask": tok_lib.pad_rows([[1] * len(r) for r in rows_ids], max_seq_length),
      "segment_ids": tok_lib.pad_rows(rows_seg, max_seq_length),
      "labels": np.asarray(labels, dtype=np.float32 if regression else np.int32),
      "example_index": np.asarray(index, dtype=np.int32),
  }
  return features, log


def class_weights(labels, num_classes: int,
                  mode: Union[str, Sequence[float]] = "inverse_frequency") -> np.ndarray:
  """Per-class loss weights [num_classes] float32 for imbalanced classification.

  Args:
    labels: [N] int label ids of the training set; negative ids (unlabeled) ignored.
    num_classes: C.
    mode: "inverse_frequency": w_c = N / (C_seen * n_c), so that the mean weight over
      the training examples is exactly 1 (the loss scale, hence the learning rate,
      stays comparable to unweighted training; sklearn's "balanced"). A class absent
      from `labels` gets weight 1.0 (it never occurs in this loss; a warning is
      logged). "uniform": all ones. A sequence of C non-negative numbers: used as given.
  """
  if not isinstance(mode, str):
    w = np.asarray(mode, dtype=np.float32)
    if w.shape != (num_classes,) or np.any(w < 0) or not np.all(np.isfinite(w)):
      raise ValueError(f"Given class weights must be {num_classes} finite non-negative "
                       f"numbers, got {mode!r}.")
    return w
  if mode == "uniform":
    return np.ones(num_classes, dtype=np.float32)
  if mode != "inverse_frequency":
    raise ValueError(f"Unknown class weight mode {mode!r}.")
  labels = np.asarray(labels, dtype=np.int64)
  labels = labels[labels >= 0]
  if labels.size == 0:
    raise ValueError("class_weights needs at least one labeled example.")
  if labels.max() >= num_classes:
    raise ValueError(f"Label id {labels.max()} >= num_classes={num_classes}.")
  counts = np.bincount(labels, minlength=num_classes).astype(np.float64)
  seen = counts > 0
  w = np.ones(num_classes, dtype=np.float64)
  w[seen] = labels.size / (seen.sum() * counts[seen])
  if not seen.all():
    logging.warning("class_weights: classes %s never occur; their weight is 1.0.",
                    np.flatnonzero(~seen).tolist())
  return w.astype(np.float32)
