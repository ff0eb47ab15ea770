"""Which platform a program is being traced for, and tracing on a mesh.

An AOT compile traces for a TPU topology on a CPU host, and a program may be lowered for
cuda on a machine without a GPU, so "which backend is this" is a question about the
trace, not the host: the per-platform choices (kernels/: which attention kernel; the
train step's non-finite guard) ask `trace_platform()`.
"""
from __future__ import annotations

import contextvars
import functools

import jax
from jax.sharding import Mesh


def traced_on(mesh: Mesh, fn):
  """fn, traced with `mesh` as the abstract mesh, so `constrain` pins activations inside.

  Only the trace sees the mesh: eager code around the call (the loop's host work, an AOT
  compile whose devices are a topology description) keeps its default placement, which
  `jax.set_mesh` around the whole loop would change.
  """
  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    token = _TRACE_PLATFORM.set(mesh.devices.flat[0].platform)
    try:
      with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
        return fn(*args, **kwargs)
    finally:
      _TRACE_PLATFORM.reset(token)
  return wrapped


def with_trace_platform(platform: str, fn):
  """fn, traced as if for `platform` ("gpu", "tpu", "cpu"; cuda / rocm are "gpu") with no
  mesh: what the per-platform choices (attention kernels, the train step's non-finite
  guard) pick when a program is lowered for another platform than the host's, e.g.
  `jax.jit(f).trace(...).lower(lowering_platforms=("cuda",))` on a CPU machine."""
  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    token = _TRACE_PLATFORM.set(platform)
    try:
      return fn(*args, **kwargs)
    finally:
      _TRACE_PLATFORM.reset(token)
  return wrapped


# The platform of the mesh a step is being traced on (set by `traced_on`).
_TRACE_PLATFORM: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "bert_jax_trace_platform", default=None)


def trace_platform() -> str:
  """"tpu" / "gpu" / "cpu": what the code being traced will compile for. Inside
  `traced_on` the mesh's devices say it (an AOT compile traces for a TPU topology on a CPU
  host); elsewhere jax's default backend. Per-platform kernels (kernels/) ask this.
  """
  platform = _TRACE_PLATFORM.get() or jax.default_backend()
  return "gpu" if platform in ("cuda", "rocm") else platform
