"""Why a checkpoint did not restore: a damaged step, or storage that failed for a moment.

A resume that takes every read failure for corruption rolls a run back past a good step
whenever the object store has a bad minute (and moves the good step aside). So restore
asks `transient(e)` first: permission, time-out, connection and throttling errors, and
I/O errors of the device, are retried (`retry`), then reported as CheckpointReadError,
with nothing moved and nothing rolled back. Only what remains (files missing, a tree or
JSON that does not parse, a short or garbled array chunk) marks the step unreadable.

The meta of every step records `FORMAT`, the layout of state/data/meta this code writes,
and the package version that wrote it; `check_format` refuses a step written in a newer
layout by newer code, naming both versions, instead of a traceback from deep inside orbax.
"""
from __future__ import annotations

import errno
import importlib.metadata
import time
from typing import Callable, Optional, TypeVar

FORMAT = 1  # bump when state/data/meta change in a way older code cannot read

_TRANSIENT_ERRNOS = {errno.EACCES, errno.EPERM, errno.EIO, errno.EAGAIN, errno.ETIMEDOUT,
                     errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED,
                     errno.ENETUNREACH, errno.EHOSTUNREACH}
# Status words of tensorstore / gRPC / HTTP errors that say "the storage, not the data".
_TRANSIENT_WORDS = ("PERMISSION_DENIED", "UNAVAILABLE", "DEADLINE_EXCEEDED",
                    "RESOURCE_EXHAUSTED", "UNAUTHENTICATED", "Permission denied",
                    "Connection reset", "timed out", " 429 ", " 503 ", "Too Many Requests",
                    "Service Unavailable")

T = TypeVar("T")


class CheckpointReadError(OSError):
  """A step that could not be read for a reason outside its files (permissions, network,
  the disk): the run stops here instead of rolling back to an older step."""


class NoRestorableCheckpointError(ValueError):
  """Every checkpoint of a workdir failed to restore, each for a reason of its files."""


class CheckpointFormatError(ValueError):
  """A step written in a layout this code does not know (newer code wrote it)."""


def version() -> str:
  try:
    return importlib.metadata.version("bert_jax")
  except importlib.metadata.PackageNotFoundError:
    return "unknown"


def stamp(meta: dict) -> dict:
  """`meta` with the layout and the code version that writes it."""
  return dict(meta, format=FORMAT, code_version=version())


def check_format(meta: dict, where: str) -> None:
  """CheckpointFormatError (one line, both versions) for a step in a newer layout; a step
  without a format field predates it (format 0, which this code reads)."""
  found = meta.get("format", 0)
  if not isinstance(found, int) or found > FORMAT:
    raise CheckpointFormatError(
        f"checkpoint {where} was written in checkpoint format {found!r} by bert_jax "
        f"{meta.get('code_version', 'unknown')}; this is bert_jax {version()}, which reads "
        f"format {FORMAT} and older: upgrade bert_jax to resume it.")


def transient(e: BaseException) -> bool:
  """Whether `e` (or an error it wraps) is the storage failing, not the step's files."""
  seen = set()
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    if isinstance(e, (PermissionError, TimeoutError, ConnectionError, CheckpointReadError)):
      return True
    if isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNOS:
      return True
    if not isinstance(e, FileNotFoundError) and any(w in str(e) for w in _TRANSIENT_WORDS):
      return True
    e = e.__cause__ or e.__context__
  return False


def retry(read: Callable[[], T], where: str, attempts: int = 3,
          delay_s: float = 1.0, sleep: Optional[Callable[[float], None]] = None) -> T:
  """read(), again after a transient failure (waiting 1, 2, 4 s ...); the last transient
  failure becomes a CheckpointReadError naming `where` and the cause."""
  for attempt in range(attempts):
    try:
      return read()
    except Exception as e:  # noqa: BLE001 - only transient failures are retried
      if not transient(e):
        raise
      if attempt == attempts - 1:
        first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        raise CheckpointReadError(
            f"checkpoint {where} could not be read after {attempts} tries ({first}): a "
            "storage or permission error, not a damaged checkpoint, so nothing was rolled "
            "back or moved; fix the access and run the same command again (if it persists "
            "on one step, a bad disk: move that step aside).") from e
      (sleep or time.sleep)(delay_s * 2 ** attempt)
  raise AssertionError("unreachable")
