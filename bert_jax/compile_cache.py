"""jax's persistent compilation cache, with an entry it cannot read removed after one warning.

jax writes a cache entry in place (`LRUCache.put`: `path.write_bytes`) and never rewrites
an entry that exists. A run killed during a cold compile can leave a truncated entry,
and then every later run failed to read it and warned "Error reading persistent
compilation cache entry ..." forever. With `remove_unreadable_entries()` the run that
meets such an entry warns once (jax's warning, and ours naming the file), removes it,
compiles as on a miss, and the next run writes and reads the entry afresh.

It wraps jax internals (`jax._src.compilation_cache.get_executable_and_time`, the
LRUCache's `path` and entry suffix), checked with jax 0.10.2; where they are missing it
does nothing and jax behaves as before (tests/test_compile_cache.py would then fail).
"""
from __future__ import annotations

import functools

from absl import logging

_installed = False


def remove_unreadable_entries() -> bool:
  """Installs the wrapper (once per process); False if this jax lacks what it wraps."""
  global _installed
  if _installed:
    return True
  try:
    from jax._src import compilation_cache, lru_cache  # pylint: disable=g-import-not-at-top
    read = compilation_cache.get_executable_and_time
    suffixes = (lru_cache._CACHE_SUFFIX, lru_cache._ATIME_SUFFIX)  # pylint: disable=protected-access
  except (ImportError, AttributeError):
    return False

  @functools.wraps(read)
  def get_executable_and_time(cache_key, *args, **kwargs):
    try:
      return read(cache_key, *args, **kwargs)
    except Exception:
      _remove(compilation_cache, cache_key, suffixes)
      raise  # jax warns (once: the entry is gone) and compiles as on a miss
  compilation_cache.get_executable_and_time = get_executable_and_time
  _installed = True
  return True


def _remove(compilation_cache, cache_key: str, suffixes) -> None:
  """Removes the entry if its bytes can be read: it is then the entry that is broken
  (truncated by a kill), not the reading (a passing I/O error keeps the entry)."""
  cache = getattr(compilation_cache, "_cache", None)
  path = getattr(cache, "path", None)
  if path is None:
    return
  try:
    if cache.get(cache_key) is None:
      return
    entry = path / f"{cache_key}{suffixes[0]}"
    for suffix in suffixes:
      (path / f"{cache_key}{suffix}").unlink(missing_ok=True)
  except Exception:  # noqa: BLE001 - the cache is an optimization: never fail the run here
    return
  logging.warning("Removed the unreadable compilation cache entry %s (a run killed while "
                  "writing it?): it is compiled afresh and written again.", entry)
