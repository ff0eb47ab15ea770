"""tqdm progress bars for the long host-side steps (embedding a file, predicting, a
whole-split evaluation, corpus preparation), on stderr.

Shown only when stderr is a terminal: logs, pipes and CI output stay clean. Switched off
for the whole process by `--config.progress=False` (bert_jax.main), `--noprogress`
(bert_jax.embed) or `set_enabled(False)`.
"""
from __future__ import annotations

import sys

_enabled = True


def set_enabled(enabled: bool) -> None:
  global _enabled
  _enabled = bool(enabled)


def enabled() -> bool:
  return _enabled and sys.stderr.isatty()


def bar(iterable=None, *, total: int | None = None, desc: str | None = None,
        unit: str = "it", show: bool = True):
  """A tqdm bar over `iterable` (or updated by hand: `.update(n)`, `.close()`), a silent
  stand-in with the same methods when progress is off or `show` is False (e.g. not
  process 0)."""
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr,
              disable=not (show and enabled()), leave=False, dynamic_ncols=True)
