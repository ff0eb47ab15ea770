"""Lowers and compiles a config's train and eval steps for a TPU topology (no TPU needed).

The state, its shardings and the jitted steps come from train/loop.py's own functions
(`abstract_state`, `jit_steps`), and the batch from the task's dummy batch with the
loop's batch sharding, so what compiles here is what a pod would run.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import ml_collections

from bert_jax.hardware import chips
from bert_jax.runtime import parallel
from bert_jax.aot import hlo
from bert_jax.train import loop, optim
from bert_jax.train import phases as phases_lib


@dataclasses.dataclass
class CompiledStep:
  name: str                    # "train" | "eval"
  phase: dict                  # the config.train.phases entry ({} without phases)
  compiled: Any                # jax.stages.Compiled (None when it did not fit)
  seconds: float               # lower + compile wall time
  error: str = ""              # the compiler's out-of-memory message, when it failed
  hlo_text: str | None = None  # the compiled HLO (None: not compiled, or XLA cannot print it)
  hlo_error: str = ""          # why the HLO text is missing although it compiled


@dataclasses.dataclass
class Setup:
  chip: chips.Chip
  mesh: Any
  task: Any
  abstract: Any                # the TrainState of ShapeDtypeStructs with shardings
  state_sh: Any
  p_train: Any
  p_eval: Any


def abstract_batch(task, mesh, batch_size: int, phase: dict) -> dict:
  """The task's dummy batch as global ShapeDtypeStructs, rows over the data axes."""
  dummy = task.dummy_batch(batch_size, **task.phase_shapes(phase))
  return {k: jax.ShapeDtypeStruct(v.shape, v.dtype,
                                  sharding=parallel.batch_sharding(mesh, v.ndim))
          for k, v in dummy.items()}


def phases(config: ml_collections.ConfigDict) -> list[dict]:
  return [dict(p) for p in config.train.get("phases") or ()] or [{}]


def setup(config: ml_collections.ConfigDict, topology: str, task) -> Setup:
  """Mesh over the topology's devices, the abstract sharded state and the jitted steps."""
  chip, devices = chips.topology_devices(topology)
  mesh = parallel.create_mesh(tuple(config.mesh_shape), devices=devices)
  tc = config.train
  # The loop's own checks (every phase's batch size, fractions), as one line each.
  phases_lib.check(tc, parallel.data_parallel_size(mesh), mesh.shape.values())
  # The schedule's length only changes constants inside the step, not its shapes.
  tx, schedule = optim.make_optimizer(tc, max(int(tc.get("num_steps") or 0), 1))
  dummy = task.dummy_batch(tc.batch_size, **task.phase_shapes(phases(config)[0]))
  with mesh:
    _, _, state_sh, abstract = loop.abstract_state(task, tx, mesh, dummy, config.seed)
  p_train, p_eval = loop.jit_steps(task, tx, schedule, tc, state_sh, mesh)
  return Setup(chip, mesh, task, abstract, state_sh, p_train, p_eval)


def is_out_of_memory(e: Exception) -> bool:
  text = str(e)
  return "RESOURCE_EXHAUSTED" in text or "Ran out of memory" in text


def compile_lowered(name: str, phase: dict, lower,
                    compiler_options: dict | None = None) -> CompiledStep:
  """Compiles `lower()` (a jax.stages.Lowered), with XLA `compiler_options`; an
  out-of-memory compile returns the compiler's message instead. Times lowering + compile;
  keeps the HLO text (or why XLA could not print it)."""
  t0 = time.perf_counter()
  try:
    compiled = lower().compile(compiler_options)
  except Exception as e:  # pylint: disable=broad-except
    if not is_out_of_memory(e):
      raise
    return CompiledStep(name, phase, None, time.perf_counter() - t0, str(e))
  seconds = time.perf_counter() - t0
  text, why = hlo.compiled_text(compiled)
  return CompiledStep(name, phase, compiled, seconds, hlo_text=text, hlo_error=why)


def compile_step(s: Setup, name: str, phase: dict, batch_size: int,
                 compiler_options: dict | None = None) -> CompiledStep:
  """Compiles one step of a task's shared loop (see compile_lowered)."""
  batch = abstract_batch(s.task, s.mesh, batch_size, phase)

  def lower():
    with s.mesh:
      if name == "train":
        return s.p_train.lower(s.abstract, batch)
      return s.p_eval.lower(s.abstract.params, batch)
  return compile_lowered(name, phase, lower, compiler_options)
