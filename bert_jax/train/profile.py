"""Profiles on request: a jax profiler trace of chosen train steps, after compile.

`--config.train.profile_steps=N` traces N steps (0: none) starting at
`train.profile_first_step` (0: the second step this run executes, so the first step's
compile is never in the trace). The trace goes to the workdir, where TensorBoard already
reads the scalars: `tensorboard --logdir WORKDIR` -> the Profile tab (the
tensorboard-plugin-profile / XProf package), or open WORKDIR/plugins/profile/RUN/
*.xplane.pb in XProf. Each traced step is a StepTraceAnnotation named "train" with its
step number, which is what the profile plugin's step-time view groups by.
"""
from __future__ import annotations

import os

import jax


def libtpu_loaded() -> bool:
  """Whether libtpu's shared library is mapped into this process (Linux; else False)."""
  try:
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
      return any("libtpu" in line for line in f)
  except OSError:
    return False


class StepProfiler:
  """Starts the trace before the first chosen step, annotates each step, and stops after
  the last one once its outputs are ready (a trace that stopped at dispatch would miss
  the device work). Inactive (no trace, no annotation) when num_steps is 0."""

  def __init__(self, workdir: str, num_steps: int, first_step: int, start_step: int,
               log=print):
    if num_steps < 0 or first_step < 0:
      raise ValueError(f"train.profile_steps={num_steps} / train.profile_first_step="
                       f"{first_step}: expected integers >= 0.")
    self.logdir = workdir
    self.first = first_step or start_step + 2   # step numbers count from 1
    self.last = self.first + num_steps - 1
    self.active = num_steps > 0
    self.tracing = False
    self._log = log
    if self.active and self.first <= start_step:
      log(f"profile: steps {self.first}-{self.last} are not after this run's start "
          f"({start_step}); nothing traced.")
      self.active = False
    if self.active and libtpu_loaded() and jax.default_backend() != "tpu":
      # libtpu's profiler plugin, once the library is in the process (an AOT compile for a
      # TPU topology loads it), makes start_trace segfault on another backend: say so
      # instead of crashing the run.
      log("profile: libtpu is loaded in this process but the backend is "
          f"{jax.default_backend()}: its profiler plugin would crash the trace; nothing "
          "traced (profile in a process that has not compiled for a TPU topology).")
      self.active = False

  def run(self, step: int, fn, *args):
    """fn(*args) as train step number `step` (1-based), traced when it is chosen."""
    if not self.active or not self.first <= step <= self.last:
      return fn(*args)
    if not self.tracing:
      # No Python call tracing: the data loader's threads fill a trace with their calls
      # (2 tiny steps: 18 MB of it); the device and XLA-op timelines are what is read.
      options = jax.profiler.ProfileOptions()
      options.python_tracer_level = 0
      jax.profiler.start_trace(self.logdir, profiler_options=options)
      self.tracing = True
    with jax.profiler.StepTraceAnnotation("train", step_num=step):
      out = fn(*args)
    if step == self.last:
      self.close(out)
    return out

  def close(self, outputs=None) -> None:
    """Stops a running trace (at the last chosen step, or when the run ends first)."""
    if not self.tracing:
      return
    if outputs is not None:
      jax.block_until_ready(outputs)
    jax.profiler.stop_trace()
    self.tracing = False
    self._log(f"profile: steps {self.first}-{self.last} traced into "
              f"{os.path.join(self.logdir, 'plugins', 'profile')} (tensorboard --logdir "
              f"{self.logdir}, Profile tab)")
