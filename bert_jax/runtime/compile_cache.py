"""jax's persistent compilation cache, with an entry it cannot read removed after one warning.

jax writes a cache entry in place (`LRUCache.put`: `path.write_bytes`) and never rewrites
an entry that exists. A run killed during a cold compile can leave a truncated entry,
and then every later run failed to read it and warned "Error reading persistent
compilation cache entry ..." forever. With `remove_unreadable_entries()` the run that
meets such an entry warns once (jax's warning, and ours naming the file), removes it,
compiles as on a miss, and the next run writes and reads the entry afresh.

`set_compilation_cache` turns the cache on for a command (training and the inference
CLIs: `--compilation_cache`, default $JAX_COMPILATION_CACHE_DIR else ~/.cache/bert_jax/xla).

It wraps jax internals (`jax._src.compilation_cache.get_executable_and_time`, the
LRUCache's `path` and entry suffix), checked with jax 0.10.2; where they are missing it
does nothing and jax behaves as before (tests/test_compile_cache.py would then fail).
"""
from __future__ import annotations

import functools

from absl import logging

_installed = False
# The inference CLIs' threshold (jax's default is 1 s): their programs compile in 0.3-2 s
# each and are read back in a small part of that, and a CLI pays them on every call.
INFERENCE_MIN_COMPILE_SECS = 0.3


def set_compilation_cache(directory: str | None, min_compile_secs: float | None = None) -> str:
  """Persistent compilation cache: a resumed or repeated run skips its compiles.

  Its key is the program and the compile options, so a changed model or mesh compiles
  afresh. Only compiles over jax's threshold (1 s by default, or `min_compile_secs`;
  JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS, when set, wins) are stored; a write that
  fails (read-only home) is only a warning, and an entry a killed run left truncated is
  removed at its first failed read. `directory`: the --compilation_cache value (None:
  $JAX_COMPILATION_CACHE_DIR, else ~/.cache/bert_jax/xla). Returns the directory used
  ('' = off).
  """
  import os  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  if directory is None:
    directory = os.environ.get("JAX_COMPILATION_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "bert_jax", "xla")
  if directory:
    jax.config.update("jax_compilation_cache_dir", directory)
    if (min_compile_secs is not None
        and "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ):
      jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_secs)
    remove_unreadable_entries()  # a kill mid-write: one warning, not forever
  return directory


# --compilation_cache's help, the same in every CLI that has the flag (each adds what a
# repeated run of it skips).
FLAG_HELP = ("Directory of the persistent XLA compilation cache (default: "
             "$JAX_COMPILATION_CACHE_DIR, else ~/.cache/bert_jax/xla); '' turns it off.")


def add_flag(parser) -> None:
  """--compilation_cache for an argparse CLI (embed, fill_mask, generate)."""
  parser.add_argument("--compilation_cache", default=None, help=FLAG_HELP + (
      " A repeated call loads its compiled programs instead of compiling."))


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
