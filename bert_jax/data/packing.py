"""First-fit decreasing bin packing of sequences into fixed-length rows (host, numpy).

`first_fit_decreasing` is the one packer of bert_jax.embed (no cap) and of fine-tuning,
which caps the sequences a row holds: the fine-tuning heads pool a fixed number of
examples a row (static shapes), so a row of many short sentences must not exceed it.

FFD's placement depends only on the lengths in sorted order, not on which sequence has
which length: the fine-tuning packer (tasks/finetune/packing.py) relies on it to give
every epoch the same number of rows while ties (many sentences share a length) are
broken by that epoch's shuffle, so row mates change from epoch to epoch.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


def first_fit_decreasing(lengths: Sequence[int], row_length: int,
                         max_per_row: Optional[int] = None, free: Optional[np.ndarray] = None,
                         room: Optional[np.ndarray] = None) -> np.ndarray:
  """[n] row index of each sequence: rows of at most row_length tokens and max_per_row
  sequences, filled longest first, each sequence into the first row it fits.

  Rows are numbered in the order they are opened (the longest sequences open the first
  rows); ties keep the input order (a stable sort), so shuffling the input shuffles
  which of equally long sequences share a row.

  free / room: rows already open, their free tokens and how many more sequences each
  may take (None: max_per_row each), both updated in place: sequences then go only into
  those rows, and one that fits none gets -1.
  """
  lengths = np.asarray(lengths, np.int64)
  opens = free is None
  if lengths.size and (lengths.min() < 1 or (opens and lengths.max() > row_length)):
    raise ValueError(f"sequence lengths must be in [1, {row_length}]; got "
                     f"{lengths.min()}..{lengths.max()}.")
  cap = len(lengths) if max_per_row is None else int(max_per_row)
  if cap < 1:
    raise ValueError(f"max_per_row={max_per_row} must be >= 1.")
  row_of = np.full(len(lengths), -1, np.int64)
  if opens:
    free = np.empty(len(lengths), np.int64)    # free tokens of each open row
    room = np.empty(len(lengths), np.int64)    # sequences each open row may still take
  elif room is None:
    room = np.full(len(free), cap, np.int64)
  num_rows = 0 if opens else len(free)
  shortest = lengths.min() if lengths.size else 0
  for i in np.argsort(-lengths, kind="stable"):
    if not opens and np.max(np.where(room > 0, free, 0), initial=0) < shortest:
      break                                    # not even the shortest fits any more
    fits = np.flatnonzero((free[:num_rows] >= lengths[i]) & (room[:num_rows] > 0))
    if fits.size:
      row = fits[0]
    elif opens:
      row, free[num_rows], room[num_rows], num_rows = num_rows, row_length, cap, num_rows + 1
    else:
      continue
    free[row] -= lengths[i]
    room[row] -= 1
    row_of[i] = row
  return row_of

