"""multihost.StopVote through a real coordination service (jax.distributed's, started in
this process with one client per stand-in process): every process reads the same
decision, one step after the vote, whoever voted. Two real processes:
tests/train/test_loop_multihost.py."""
import itertools
import threading
import time

import portpicker
import pytest
from jaxlib import _jax

from bert_jax.runtime import multihost


_runs = itertools.count()


@pytest.fixture(scope="module")
def clients():
  """Two connected clients of one coordination service (the KV store jax.distributed
  starts on process 0), as processes 0 and 1 of a job would hold them."""
  address = f"127.0.0.1:{portpicker.pick_unused_port()}"
  service = _jax.get_distributed_runtime_service(address, 2)
  pair = [_jax.get_distributed_runtime_client(address, i, init_timeout=60) for i in range(2)]
  connecting = [threading.Thread(target=c.connect) for c in pair]  # both must register
  for t in connecting:
    t.start()
  for t in connecting:
    t.join()
  yield pair
  leaving = [threading.Thread(target=c.shutdown) for c in pair]
  for t in leaving:
    t.start()
  for t in leaving:
    t.join()
  service.shutdown()


def _votes(clients, **kw):
  key = f"test/{next(_runs)}"  # the stand-ins of one run share its keys
  return [multihost.StopVote(c, process_index=i, process_count=2, key=key, **kw)
          for i, c in enumerate(clients)]


def _steps(votes, per_step):
  """Each step, every process casts its vote (in process order, as a lockstep run does);
  the decisions every process read, step by step."""
  return [tuple(v.cast(signal) for v, signal in zip(votes, step)) for step in per_step]


def test_a_signal_on_one_process_stops_every_process_one_step_later(clients):
  votes = _votes(clients)
  decisions = _steps(votes, [("", "SIGTERM"), ("", "SIGTERM"), ("", "SIGTERM")])
  # Step 1 goes on (no earlier votes); step 2 reads step 1's: process 1 alone asked.
  assert decisions == [("", ""), ("SIGTERM", "SIGTERM"), ("SIGTERM", "SIGTERM")]


def test_signals_at_different_steps_are_decided_at_the_first_one(clients):
  """Process 0 gets SIGTERM at step 3, process 1 at step 4 (hosts ~1 s apart): both read
  the same answer at every step, and both stop after step 4."""
  votes = _votes(clients)
  decisions = _steps(votes, [("", ""), ("", ""), ("SIGTERM", ""), ("SIGTERM", "SIGTERM")])
  assert decisions == [("", "")] * 3 + [("SIGTERM", "SIGTERM")]


@pytest.mark.parametrize("step1, agreed", [
    (("", ""), ""),
    (("", "SIGINT"), "SIGINT"),
    # A Ctrl-C anywhere wins over a preemption elsewhere: every process exits 130.
    (("SIGTERM", "SIGINT"), "SIGINT"),
    (("SIGINT", "SIGTERM"), "SIGINT"),
])
def test_the_agreed_signal_is_the_strongest_vote(clients, step1, agreed):
  assert _steps(_votes(clients), [step1, ("", "")])[1] == (agreed, agreed)


def test_old_votes_are_deleted_and_a_peer_behind_is_waited_for(clients):
  votes = _votes(clients)
  _steps(votes, [("", "")] * 6)
  prefix = votes[0]._prefix  # pylint: disable=protected-access
  left = {key.split("/")[-2] for key, _ in clients[0].key_value_dir_get(prefix)}
  assert left == {"3", "4", "5"}  # steps 0-2 deleted by process 0 (the store stays small)
  # Process 0 reaches step 7 before process 1 has voted on step 6: it waits for that vote.
  got = []
  ahead = threading.Thread(target=lambda: got.append(votes[0].cast("")))
  votes[0].cast("")  # step 6 (0-based) of process 0
  ahead.start()      # its step 7: needs process 1's step 6
  time.sleep(0.3)
  assert not got
  votes[1].cast("SIGTERM")  # process 1's step 6
  ahead.join(timeout=30)
  assert got == ["SIGTERM"]


def test_a_peer_that_never_votes_is_an_error_not_a_hang(clients):
  lonely = multihost.StopVote(clients[0], process_index=0, process_count=2, timeout_s=0.5,
                              key="test/lonely")
  lonely.cast("")
  with pytest.raises(RuntimeError, match="process 1 did not vote on stopping after step 1"):
    lonely.cast("")


def test_one_process_exchanges_nothing():
  assert multihost.allgather("anything", {"a": [1, 2]}) == [{"a": [1, 2]}]
