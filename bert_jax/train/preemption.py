"""Stopping a run cleanly on a signal: the handlers, and the line a stopped run ends with.

The loop (train/loop.py) saves the step it stops at and returns; main.py turns how it
stopped into the exit status (0 for SIGTERM, 130 for Ctrl-C). With several processes
each one's signal is a vote, and all stop at the step they agree on (multihost.StopVote).
"""
from __future__ import annotations

import signal
import threading

import jax

from bert_jax.train.writer import log

# Set by the command line (main.py), whose process ends with the run: once a run has
# stopped on a signal, later SIGTERMs are ignored until the process exits. SIG_IGN, not a
# Python handler: the interpreter's finalization puts Python handlers back to the
# default (a SIGTERM then still killed the process, seen in scripts/multihost.py --stop),
# but keeps an ignored signal ignored. Off for in-process callers (tests, notebooks),
# whose handlers are put back as they were.
HOLD_SIGTERM_AFTER_A_STOP = False


class Preemption:
  """SIGTERM (preemption) or a first Ctrl-C (SIGINT) sets a flag: the loop saves the step
  in progress and exits cleanly. It checks the flag every step, and keeps at most one
  step queued ahead of the device, so that step is the one the device runs when the
  signal comes, or the one queued behind it. A second Ctrl-C interrupts at once, as
  Python's default (a Ctrl-C was a KeyboardInterrupt traceback that lost the steps since
  the last save). With several processes the flag is only this process's vote, read by
  all one step later: every process stops at the step they agree on, the step after
  this process's step in progress (bert_jax/runtime/multihost.py StopVote). The SLURM
  (scancel, time limit) and TPU (preemption, maintenance) launchers send SIGTERM."""

  _SIGNALS = (signal.SIGTERM, signal.SIGINT)

  def __init__(self, agreed: bool = False):
    self.requested = False
    self.name = ""  # of the signal that asked
    # Set by the loop when the run stops on a signal (this process's or the agreed one).
    # Another host's preemption notice, or a supervisor's repeat, can reach this process
    # while it writes its last save and shuts down (with several processes that is
    # common: the one whose own SIGTERM comes last has usually stopped on the vote
    # already); Python's default would then kill it mid-way, exit status -15, not 0.
    self.stopping = False
    self._previous = {}
    self._when = ("the end of the step every process agrees on (the next one: the votes "
                  "are read a step later)") if agreed else "the end of the step in progress"

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      self._previous = {s: signal.signal(s, self._handler) for s in self._SIGNALS}
    return self

  def _handler(self, signum, frame):
    del frame
    if signum == signal.SIGINT and self.requested:
      raise KeyboardInterrupt  # the second Ctrl-C: do not wait for the save
    if signum == signal.SIGINT:
      log(f"Ctrl-C: saving at {self._when}, then exiting (Ctrl-C again to abort).")
    self.requested, self.name = True, signal.Signals(signum).name

  def __exit__(self, *exc):
    for s, previous in self._previous.items():
      signal.signal(s, previous)
    if self._previous and self.stopping and HOLD_SIGTERM_AFTER_A_STOP:
      signal.signal(signal.SIGTERM, signal.SIG_IGN)


def log_stop(signal_name: str, step: int, directory) -> None:
  """The line a stopped run ends with; from every process when there are several (each
  says it saved the agreed step)."""
  if jax.process_count() == 1:
    log(f"{signal_name}: saved step {step} in {directory}; exiting.")
  else:
    print(f"process {jax.process_index()}: {signal_name} (agreed by all "
          f"{jax.process_count()} processes): saved step {step} in {directory}; exiting.",
          flush=True)
