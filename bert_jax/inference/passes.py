"""How texts of given token lengths are packed into forward passes of few shapes.

Several texts share a row (each with its own positions and segment id), so padding is a
few percent of the tokens instead of up to half of them with one text a row; the passes
come in at most two shapes a call, from a small fixed set across calls, so a new input
size rarely compiles again. encode.run_model runs the plans made here; bench/RESULTS.md
(the Embedding sections) has the token counts and timings that chose the numbers below.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from bert_jax.data.packing import first_fit_decreasing

# Rows of ROW_LENGTH tokens (longer texts: a multiple of LENGTH_BUCKET); a pass holds about
# batch_size * TOKENS_PER_TEXT tokens.
ROW_LENGTH = 96
LENGTH_BUCKET = 32
TOKENS_PER_TEXT = 64


def pack(lengths: Sequence[int], row_length: int, free: np.ndarray | None = None) -> np.ndarray:
  """First-fit decreasing: [texts] row index of each text, so that the lengths in a row
  sum to at most row_length (each length must be <= row_length). Rows are numbered in
  the order they are opened; the longest texts open the first rows.

  free: rows already open, their free tokens (updated in place): texts go only into
  them, and one that fits none gets -1.
  """
  return first_fit_decreasing(lengths, row_length, free=free)


@dataclasses.dataclass
class PackPlan:
  """One shape of packed forward passes: `passes` passes of `rows` rows of `row_length`
  tokens. Text `texts[k]` goes into row `row_of[k]` (numbered across the passes: row r
  is row r % rows of pass r // rows), after the texts placed there before it."""
  texts: np.ndarray
  row_of: np.ndarray
  row_length: int
  rows: int
  passes: int


def plan_passes(lengths: Sequence[int], batch_size: int) -> list[PackPlan]:
  """How texts of these token lengths run: at most two shapes, so at most two compiles.

  Texts up to ROW_LENGTH tokens share rows of ROW_LENGTH (attention over a row grows
  with its length, and sentences ran fastest in rows of about this length); longer ones
  get rows as long as the longest of them, rounded up to LENGTH_BUCKET. A pass holds
  about batch_size * TOKENS_PER_TEXT tokens, and the rows spread evenly over the passes,
  so every pass of a class has one shape, its rows rounded up by `rows_a_pass`: at most
  two compiles a call, and across calls one per (row length, rows a pass) of a fixed
  set. Positions that shape computes anyway are not left empty: short texts fill what
  the long rows leave (their free tokens and the rounding's empty rows), longest first,
  and the passes count is the one near the target whose rounding leaves the fewest
  empty rows (`_pass_shape`).
  """
  lengths = np.asarray(lengths, np.int64)
  short = np.flatnonzero(lengths <= ROW_LENGTH)
  short = short[np.argsort(-lengths[short], kind="stable")]   # first-fit decreasing order
  plans = []
  long = np.flatnonzero(lengths > ROW_LENGTH)
  if long.size:
    row_length = -(-int(lengths[long].max()) // LENGTH_BUCKET) * LENGTH_BUCKET
    long = long[np.argsort(-lengths[long], kind="stable")]
    row_of = pack(lengths[long], row_length)       # in long's order: already decreasing
    # The rounding's empty rows are not wasted while short texts can fill them.
    rows, passes = _pass_shape(int(row_of.max()) + 1, _target_rows(batch_size, row_length),
                               fillable=lengths[short].sum() / row_length)
    free = np.full(rows * passes, row_length, np.int64)
    np.subtract.at(free, row_of, lengths[long])
    filler = pack(lengths[short], row_length, free)           # -1: fits in no long row
    taken = filler >= 0
    plans.append(PackPlan(np.concatenate([long, short[taken]]),
                          np.concatenate([row_of, filler[taken]]), row_length, rows, passes))
    short = short[~taken]
  if short.size:
    row_of = pack(lengths[short], ROW_LENGTH)
    rows, passes = _pass_shape(int(row_of.max()) + 1, _target_rows(batch_size, ROW_LENGTH))
    plans.insert(0, PackPlan(short, row_of, ROW_LENGTH, rows, passes))
  return plans


def _target_rows(batch_size: int, row_length: int) -> int:
  """Rows of row_length in a pass of about batch_size * TOKENS_PER_TEXT tokens."""
  return max(1, batch_size * TOKENS_PER_TEXT // row_length)


def _pass_shape(rows_needed: int, target: int, fillable: float = 0.0) -> tuple[int, int]:
  """(rows a pass, passes) for rows_needed rows at about target rows a pass.

  ceil(rows_needed / target) passes, or up to two more, or one fewer while its passes
  stay within 1.5x the target, whichever leaves the fewest rows empty once a pass's rows
  are rounded up by rows_a_pass and `fillable` rows' worth of other texts have filled
  what they can (ties: the target's count). E.g. 168 rows at 42 a pass: 4 passes of 48
  compute 24 empty rows, 3 of 56 none.
  """
  first = -(-rows_needed // target)
  best = None
  for p in range(max(1, first - 1), first + 3):
    per_pass = rows_a_pass(-(-rows_needed // p))
    if p < first and per_pass > 1.5 * target:
      continue
    passes = -(-rows_needed // per_pass)                      # no empty pass
    key = (max(0.0, per_pass * passes - rows_needed - fillable), abs(p - first))
    if best is None or key < best[0]:
      best = (key, per_pass, passes)
  return best[1], best[2]


def rows_a_pass(needed: int) -> int:
  """The rows of a pass that needs `needed`: 1, 2 or 4, else a multiple of 8.

  So the compiled shapes come from a small fixed set whatever the number of texts (a
  new input size does not recompile unless its rows cross into the next step), and a
  pass carries at most 7 rows of padding.
  """
  return 1 << max(0, needed - 1).bit_length() if needed <= 4 else -(-needed // 8) * 8
