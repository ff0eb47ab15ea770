"""What every process of a multi-host run must agree on before acting: stop, and restore.

A preemption (SIGTERM) or Ctrl-C reaches the hosts of a pod at different moments, or
only one of them; a host that acted on its own signal alone (saved, left the loop) left
the others waiting in the next step's collectives forever, and nothing was saved. Both
agreements go through the coordination service's key-value store (jax.distributed),
not through device collectives: nothing waits on a device, and a peer that never
answers is an error after a timeout, not a hang.

  StopVote   each step, every process posts its "stop?" vote for that step and reads
             everyone's vote of the PREVIOUS step (one step of lag: the others posted it
             a step ago, so the read rarely waits and nothing drains the dispatch
             pipeline). Every process reads the same votes of the same step, so all stop
             after the same step. Bound: a signal that arrives during step k stops every
             process after step k + 1 (two steps at most), then the save.
  allgather  small JSON values exchanged once: the checkpoint step list and each
             restore's outcome (checkpoint.py), so every host restores the same step or
             all fall back together.

One process: nothing is exchanged (StopVote is not used, allgather returns [value]).
"""
from __future__ import annotations

import collections
import itertools
import json
from typing import Any

import jax

# The signals a vote can carry, ordered by precedence: a Ctrl-C anywhere wins over a
# preemption elsewhere (the run must then end as stopped by the user, exit 130, on every
# host, so `main && next` does not go on). "" = go on.
SIGNALS = ("", "SIGTERM", "SIGINT")

# The longest a process waits for its peers (a restore of each host's shards can take
# minutes on a large model; a dead peer is found sooner by the distributed runtime's
# heartbeat, main.py --heartbeat_timeout).
TIMEOUT_S = 600

_votes = itertools.count()  # StopVotes this process made: the n-th one's keys are run n's


def _client():
  from jax._src import distributed  # pylint: disable=g-import-not-at-top
  return distributed.global_state.client


class StopVote:
  """The stop decision every process takes at the same step (module docstring).

  client, process_index, process_count: the jax.distributed client and this process's
  place (default: the running job's); tests pass clients of their own service.
  key: where the votes live in the store (default: one per StopVote this process made,
  the same on every process since each makes them in the same order); stand-ins for
  several processes in one (tests) share one key.
  """

  def __init__(self, client=None, process_index: int | None = None,
               process_count: int | None = None, timeout_s: float = TIMEOUT_S,
               key: str | None = None):
    self._client = client or _client()
    self._me = jax.process_index() if process_index is None else process_index
    self._n = jax.process_count() if process_count is None else process_count
    self._prefix = key or f"bert_jax/stop/{next(_votes)}"
    self._timeout_ms = int(timeout_s * 1000)
    self._step = 0  # the vote being cast: one per loop step, on every process

  def cast(self, vote: str) -> str:
    """Posts this process's vote for this step (a signal name, "" for none) and returns
    the agreed signal of the previous step's votes ("" = go on; the first call goes on)."""
    k, self._step = self._step, self._step + 1
    self._client.key_value_set(f"{self._prefix}/{k}/{self._me}", vote)
    if k == 0:
      return ""
    previous = f"{self._prefix}/{k - 1}"
    votes = dict(self._client.key_value_dir_get(previous))  # one call when all are there
    for i in range(self._n):
      key = f"{previous}/{i}"
      if key not in votes:  # a peer behind by a step: wait for it, not forever
        try:
          votes[key] = self._client.blocking_key_value_get(key, self._timeout_ms)
        except Exception as e:  # noqa: BLE001 - jaxlib raises its own error types
          raise RuntimeError(f"process {i} did not vote on stopping after step {k} within "
                             f"{self._timeout_ms // 1000} s: {str(e).splitlines()[0][:200]}"
                             ) from None
    if self._me == 0 and k >= 3:
      # Every process has read step k - 3's votes: each posted its vote of step k - 1
      # (read above) after finishing its previous call, which read step k - 3's.
      self._client.key_value_delete(f"{self._prefix}/{k - 3}")
    return max(votes.values(), key=SIGNALS.index)


# ------------------------------------------------------------------ key-value exchange
_rounds = collections.Counter()  # per name: how many exchanges this process made


def allgather(name: str, value: Any, timeout_s: float = TIMEOUT_S) -> list:
  """Every process's `value` (JSON-able), in process order, exchanged through the
  coordination service. Every process must make the same sequence of calls (the key of
  a call is its name and its round). A peer silent for `timeout_s` is a RuntimeError
  naming the exchange, not a hang."""
  if jax.process_count() == 1:
    return [value]
  client, rnd = _client(), _rounds[name]
  _rounds[name] += 1
  prefix = f"bert_jax/{name}/{rnd}"
  client.key_value_set(f"{prefix}/{jax.process_index()}", json.dumps(value))
  values = []
  for i in range(jax.process_count()):
    try:
      values.append(json.loads(client.blocking_key_value_get(f"{prefix}/{i}",
                                                             int(timeout_s * 1000))))
    except Exception as e:  # noqa: BLE001 - jaxlib raises its own error types
      raise RuntimeError(f"process {i} did not answer {name!r} within {timeout_s:.0f} s "
                         f"({type(e).__name__}: {str(e).splitlines()[0][:200]}).") from None
  return values
