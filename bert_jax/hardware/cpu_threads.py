"""XLA:CPU's intra-op thread pool, chosen when its backend starts: CPU tuning, opt-in.

word2vec's trainer (train.single_thread_xla_cpu, its config's default) starts the CPU
backend with one intra-op thread, so the second core builds batches on the host.
This module reads jax's private xla_bridge.backends_are_initialized (jax 0.10.2) to
leave an already started backend alone; tests/hardware/test_cpu_threads.py checks it.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os

import jax


def start_cpu_backend_single_threaded() -> bool:
  """Starts the XLA:CPU backend with a one-thread intra-op pool, if it has not started.

  XLA:CPU splits large loop fusions (the gathers and scatters here) over a thread pool
  sized by the CPUs the process may use when the backend starts. For word2vec's short
  fusions the split costs more CPU than it saves (measured on 2 cores: ~150 -> ~100 CPU ms
  per 131k pairs), and the second core is better spent building batches on the host.
  So the backend is started while the process may use one CPU, and every thread created
  meanwhile gets the full CPU set back. No-op when the backend is already up, without
  sched_setaffinity, or when the platform is not the CPU (JAX_PLATFORMS names another
  first, or, unset, an accelerator plugin is installed).

  Returns:
    whether the backend was started this way.
  """
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
  if xla_bridge.backends_are_initialized() or not hasattr(os, "sched_setaffinity"):
    return False
  platforms = jax.config.jax_platforms or os.environ.get("JAX_PLATFORMS", "")
  if platforms:
    if platforms.split(",")[0] != "cpu":
      return False
  elif (importlib.metadata.entry_points(group="jax_plugins")
        or importlib.util.find_spec("libtpu") is not None):
    return False  # an accelerator plugin is installed: the CPU is not the training device
  cpus = os.sched_getaffinity(0)
  one = {min(cpus)}
  before = set(os.listdir("/proc/self/task"))
  os.sched_setaffinity(0, one)
  try:
    jax.devices()
  finally:
    os.sched_setaffinity(0, cpus)
    for tid in set(os.listdir("/proc/self/task")) - before:
      try:
        os.sched_setaffinity(int(tid), cpus)
      except OSError:
        pass  # the thread has exited
  return True
