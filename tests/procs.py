"""`python -m bert_jax.main` in a child process for the end-to-end tests: run it to the end,
signal it at a line of its output (SIGTERM at `step 3/6`) or SIGKILL it at a moment.

The runner is scripts/fault_campaign.py's (the fault campaign and these tests share it);
the child gets this process's environment (so the session's JAX_COMPILATION_CACHE_DIR
too), this checkout on PYTHONPATH and `devices` fake CPU devices.
"""
from __future__ import annotations

import os
import signal

from scripts import fault_campaign
from scripts.fault_campaign import Run, checkpoints_ok, duplicate_steps, train_losses, xla_flags

__all__ = ["Run", "checkpoints_ok", "duplicate_steps", "main", "train_losses", "xla_flags"]


def main(flags: list[str], *, devices: int = 8, timeout: float = 300, **kill) -> Run:
  """Runs main with `flags` until it ends (at most `timeout` s); `kill` as
  fault_campaign.run_main: signal_at="step 3/6" (with sig=signal.SIGTERM) or
  kill_after=seconds (after_first_step=True: counted from the first `step k/N` line)."""
  kill.setdefault("sig", signal.SIGKILL if "kill_after" in kill else signal.SIGTERM)
  env = fault_campaign.child_env(
      XLA_FLAGS=xla_flags(devices), JAX_PLATFORMS="cpu")
  return fault_campaign.run_main(flags, env=env, timeout=timeout, **kill)
