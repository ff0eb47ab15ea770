"""The one held-out scorer of bench/time_to_quality/time_to_quality.py (numpy only: both venvs import it).

The held-out documents (the validation split) become rows `[CLS] s1 s2 ... [SEP]` of whole
sentences of one document (at most `max_len` tokens, padded with [PAD]; a sentence longer
than a row is cut). On those rows one fixed set of masked positions is drawn once, with a
fixed seed, as BERT and transformers' DataCollatorForLanguageModeling mask: 15% of each
row's non-special tokens (at least 1, at most `max_predictions`, google-research/bert's
create_pretraining_data count), of which 80% become [MASK], 10% a random token (uniform
over the non-special vocabulary, as the collator draws) and 10% stay as they are. The set
is stored (npz) in the bench's output directory; every system's checkpoints are scored
on exactly these inputs: top-1 accuracy of the prediction at each masked position
against the original token (`accuracy`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

KEYS = ("input_ids", "attention_mask", "positions", "labels", "weights")


def document_rows(documents: Sequence[Sequence[Sequence[int]]], max_len: int, cls_id: int,
                  sep_id: int) -> list[np.ndarray]:
  """Token-id rows `[CLS] whole sentences of one document [SEP]`, each <= max_len long.

  Args:
    documents: per document, its sentences as token ids (no special tokens).
    max_len: the row length (the models' sequence length).
    cls_id, sep_id: the [CLS] and [SEP] ids.
  """
  room = max_len - 2
  rows = []
  for doc in documents:
    row = []
    for sentence in doc:
      sentence = list(sentence)
      while len(sentence) > room:  # a sentence longer than a row: its own cut rows
        if row:
          rows.append(row)
          row = []
        rows.append(sentence[:room])
        sentence = sentence[room:]
      if len(row) + len(sentence) > room:
        rows.append(row)
        row = []
      row.extend(sentence)
    if row:
      rows.append(row)
  return [np.asarray([cls_id, *r, sep_id], np.int32) for r in rows if r]


def draw_masked_set(rows: Sequence[np.ndarray], max_len: int, vocab_size: int,
                    special_ids: Sequence[int], mask_id: int, pad_id: int, seed: int = 0,
                    rate: float = 0.15, max_predictions: int = 20) -> dict:
  """The fixed masked set over `rows` (module docstring): arrays named by KEYS.

  Returns:
    input_ids [N, max_len] int32 (corrupted, padded with pad_id), attention_mask
    [N, max_len] int32, positions / labels [N, max_predictions] int32 (padded with 0),
    weights [N, max_predictions] float32 (1 at a real prediction).
  """
  rng = np.random.default_rng(seed)
  special = np.zeros(vocab_size, bool)
  special[list(special_ids)] = True
  replacements = np.flatnonzero(~special)
  n = len(rows)
  out = {"input_ids": np.full((n, max_len), pad_id, np.int32),
         "attention_mask": np.zeros((n, max_len), np.int32),
         "positions": np.zeros((n, max_predictions), np.int32),
         "labels": np.zeros((n, max_predictions), np.int32),
         "weights": np.zeros((n, max_predictions), np.float32)}
  for i, row in enumerate(rows):
    row = np.asarray(row, np.int32)
    if len(row) > max_len:
      raise ValueError(f"row {i} has {len(row)} tokens, more than max_len={max_len}")
    candidates = np.flatnonzero(~special[row])
    count = min(max_predictions, max(1, int(round(rate * len(candidates)))), len(candidates))
    chosen = np.sort(rng.choice(candidates, size=count, replace=False))
    ids = row.copy()
    action = rng.random(count)                               # [count]
    random_ids = rng.choice(replacements, size=count)
    ids[chosen] = np.where(action < 0.8, mask_id,
                           np.where(action < 0.9, random_ids, row[chosen]))
    out["input_ids"][i, :len(row)] = ids
    out["attention_mask"][i, :len(row)] = 1
    out["positions"][i, :count] = chosen
    out["labels"][i, :count] = row[chosen]
    out["weights"][i, :count] = 1.0
  return out


def save(path: str, masked: dict) -> None:
  np.savez(path, **{k: masked[k] for k in KEYS})


def load(path: str) -> dict:
  with np.load(path) as z:
    return {k: z[k] for k in KEYS}


def batches(masked: dict, batch_size: int):
  """The set in row order, `batch_size` rows at a time (the last batch may be smaller)."""
  for start in range(0, len(masked["input_ids"]), batch_size):
    yield {k: v[start:start + batch_size] for k, v in masked.items()}


def accuracy(predictions: np.ndarray, masked: dict) -> float:
  """Top-1 accuracy: predictions [N, max_predictions] token ids, one per (row, slot) of
  the set's positions, against the original tokens, over the real predictions only."""
  predictions = np.asarray(predictions)
  if predictions.shape != masked["labels"].shape:
    raise ValueError(f"predictions have shape {predictions.shape}, the masked set "
                     f"{masked['labels'].shape}")
  w = masked["weights"]
  return float(np.sum((predictions == masked["labels"]) * w) / np.sum(w))
