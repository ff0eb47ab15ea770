"""Counting bad input instead of crashing on it or silently mislabeling it.

Every reader and featurizer in `bert_jax.tasks` takes its inputs as they come (users'
own files, tfds records) and, for each record it cannot use, logs a warning that says
what was wrong and where, counts it under a short reason, and skips it. The caller gets
the `SkipLog` back and can print `summary()` or assert on `counts`. Only the first few
warnings of each reason are logged, so a file with 10^5 bad lines stays readable.

Some reasons are notes, not skips (e.g. "truncated"): the record is kept but altered.
"""
from __future__ import annotations

import collections

from absl import logging


class SkipLog:
  """Per-reason counts of skipped (or altered) records, with rate-limited warnings."""

  def __init__(self, source: str, max_warnings_per_reason: int = 5):
    self.source = source  # shown in every message, e.g. the file path or "glue/sst2:train"
    self.kept = 0
    self.skipped = collections.Counter()  # reason -> records dropped
    self.notes = collections.Counter()  # reason -> records kept but altered
    self._max_warnings = max_warnings_per_reason
    self._warned = collections.Counter()  # reason -> warnings issued or suppressed

  def skip(self, reason: str, where, detail: str = "") -> None:
    """Records that the record at `where` (line number, id, index) was dropped."""
    self.skipped[reason] += 1
    self._warn("skipped", reason, where, detail)

  def note(self, reason: str, where, detail: str = "", count: int = 1) -> None:
    """Records that the record at `where` was kept but altered (truncated, ...).

    `count` > 1 counts several units at once (e.g. the words cut from one sentence).
    """
    self.notes[reason] += count
    self._warn("kept", reason, where, detail)

  def _warn(self, action, reason, where, detail):
    self._warned[reason] += 1
    count = self._warned[reason]
    if count <= self._max_warnings:
      logging.warning("%s: %s record %s (%s)%s", self.source, action, where, reason,
                      f": {detail}" if detail else "")
    if count == self._max_warnings:
      logging.warning("%s: further '%s' warnings are only counted.", self.source, reason)

  @property
  def num_skipped(self) -> int:
    return sum(self.skipped.values())

  def merge(self, other: "SkipLog") -> "SkipLog":
    """Adds `other`'s counts into this log (e.g. reader + featurizer) and returns self."""
    self.skipped.update(other.skipped)
    self.notes.update(other.notes)
    return self

  def summary(self) -> str:
    """One line: kept / skipped counts by reason, notes by reason."""
    parts = [f"{self.source}: kept {self.kept}, skipped {self.num_skipped}"]
    if self.skipped:
      parts.append("skipped: " + ", ".join(f"{r}={n}" for r, n in sorted(self.skipped.items())))
    if self.notes:
      parts.append("notes: " + ", ".join(f"{r}={n}" for r, n in sorted(self.notes.items())))
    return "; ".join(parts)

  def __repr__(self) -> str:
    return f"SkipLog({self.summary()})"
