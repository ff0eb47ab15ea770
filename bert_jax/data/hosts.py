"""Preparation on a pod: process 0 prepares, every other process waits for it and reads
the same files.

  prepared = prepare_once(key, lead=lambda: (prepare(cfg), name),
                          follow=lambda name: open_prepared(cfg, name), timeout_s=7200)

Process 0 runs `lead`, which builds (or reuses) the data and returns it with a name:
the directory whose completion marker (prepared.json, written last) now exists. It
publishes that name, or its error, in the JAX coordination service's key-value store;
the others block on that key, then `follow(name)` reads the marked directory (copying
it from gs:// to local disk when data_dir is remote). Why the name travels, not just "done":
the instances directory is named by the vocabulary's hash, which only process 0 knows
before it has trained the vocabulary, and a host must never train its own (tokenizers'
WordPiece trainer is not deterministic: two hosts could disagree on token ids).

Why the key-value store, not a marker file polled on disk: it lives for this job only
(a stale marker from an earlier run cannot be mistaken for this run's), needs no shared
filesystem, and carries process 0's error message, so the others fail with it at once
instead of waiting out the timeout.
"""
from __future__ import annotations

from typing import Callable, TypeVar

import jax

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 7200  # config.data.prepare_timeout when a config has none
_PREFIX = "bert_jax/prepared/"


def _client():
  # jax.distributed's coordination client (orbax reaches it the same way); set once
  # jax.distributed.initialize has run, which every multi-process run does first.
  from jax._src import distributed  # pylint: disable=g-import-not-at-top
  return distributed.global_state.client


def prepare_once(key: str, lead: Callable[[], tuple[T, str]], follow: Callable[[str], T],
                 timeout_s: float) -> T:
  """`lead()[0]` on process 0 (and on a single process); `follow(name)` on the others.

  Args:
    key: names this call within the job, the same on every process (e.g. the phase);
      not a hash of the config, whose host-local fields (cache_dir) may differ.
    lead: builds or reuses the data; returns (result, name of what it prepared).
    follow: reads what process 0 prepared, from its name; never builds.
    timeout_s: how long the other processes wait for process 0.

  Raises:
    TimeoutError: process 0 did not finish within timeout_s.
    RuntimeError: process 0's preparation failed (its error message is included), or
      process 0 died while preparing.
  """
  if jax.process_count() == 1:
    return lead()[0]
  client, key = _client(), _PREFIX + key
  if jax.process_index() == 0:
    try:
      result, name = lead()
    except BaseException as e:  # the others fail with this message, not a timeout
      message = f"{type(e).__name__}: {e}".replace("\n", " ")[:2000]
      client.key_value_set(key, "error:" + message, allow_overwrite=True)
      raise
    client.key_value_set(key, "ok:" + name, allow_overwrite=True)
    return result
  try:
    value = client.blocking_key_value_get(key, int(timeout_s * 1000))
  except Exception as e:  # pylint: disable=broad-except  (JaxRuntimeError)
    first = (str(e).splitlines() or [""])[0]
    if "DEADLINE_EXCEEDED" in first:
      raise TimeoutError(
          f"process {jax.process_index()}: process 0 has not finished preparing the data "
          f"after {timeout_s:.0f} s (config.data.prepare_timeout); see process 0's log, or "
          "prepare beforehand with `python -m bert_jax.prepare`.") from None
    raise RuntimeError(  # the coordination service lives in process 0: it is gone
        f"process {jax.process_index()}: lost process 0 while it prepared the data (it died "
        f"or was preempted: see its log); rerun every process ({type(e).__name__}: "
        f"{first})") from None
  status, _, rest = value.partition(":")
  if status != "ok":
    raise RuntimeError(f"process {jax.process_index()}: process 0 failed to prepare the "
                       f"data, so this process stops too: {rest}")
  return follow(rest)
