"""First-fit decreasing bin packing of sequences into fixed-length rows (host, numpy).

`first_fit_decreasing` is embed.pack's algorithm with one more constraint, a cap on the
sequences a row holds: the fine-tuning heads pool a fixed number of examples a row
(static shapes), so a row of many short sentences must not exceed it. Without a cap
(max_per_row=None) it places every sequence where embed.pack does.

FFD's placement depends only on the lengths in sorted order, not on which sequence has
which length: the fine-tuning packer (tasks/finetune/packing.py) relies on it to give
every epoch the same number of rows while ties (many sentences share a length) are
broken by that epoch's shuffle, so row mates change from epoch to epoch.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


def first_fit_decreasing(lengths: Sequence[int], row_length: int,
                         max_per_row: Optional[int] = None) -> np.ndarray:
  """[n] row index of each sequence: rows of at most row_length tokens and max_per_row
  sequences, filled longest first, each sequence into the first row it fits.

  Rows are numbered in the order they are opened (the longest sequences open the first
  rows); ties keep the input order (a stable sort), so shuffling the input shuffles
  which of equally long sequences share a row.
  """
  lengths = np.asarray(lengths, np.int64)
  if lengths.size and (lengths.min() < 1 or lengths.max() > row_length):
    raise ValueError(f"sequence lengths must be in [1, {row_length}]; got "
                     f"{lengths.min()}..{lengths.max()}.")
  cap = len(lengths) if max_per_row is None else int(max_per_row)
  if cap < 1:
    raise ValueError(f"max_per_row={max_per_row} must be >= 1.")
  row_of = np.empty(len(lengths), np.int64)
  free = np.empty(len(lengths), np.int64)    # free tokens of each open row
  room = np.empty(len(lengths), np.int64)    # sequences each open row may still take
  num_rows = 0
  for i in np.argsort(-lengths, kind="stable"):
    fits = np.flatnonzero((free[:num_rows] >= lengths[i]) & (room[:num_rows] > 0))
    row = fits[0] if fits.size else num_rows
    if row == num_rows:
      free[row], room[row], num_rows = row_length, cap, num_rows + 1
    free[row] -= lengths[i]
    room[row] -= 1
    row_of[i] = row
  return row_of


def members_by_row(row_of: np.ndarray, max_per_row: int) -> np.ndarray:
  """[rows, max_per_row] sequence indices of each row, in increasing index order, -1 in
  the empty slots."""
  num_rows = int(row_of.max()) + 1 if len(row_of) else 0
  order = np.argsort(row_of, kind="stable")
  rows = row_of[order]
  slot = np.arange(len(rows)) - np.searchsorted(rows, rows)  # position within its row
  members = np.full((num_rows, max_per_row), -1, np.int64)
  members[rows, slot] = order
  return members
