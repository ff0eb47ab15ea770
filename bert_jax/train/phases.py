"""`config.train.phases`: which steps each phase runs, at which global batch size.

A phase is a dict. The loop reads `fraction` (of the run's steps; the last phase takes
the rest) and `batch_size` (the phase's global batch; default train.batch_size); the
task reads the rest (pretraining: max_seq_length, max_predictions_per_seq, remat_policy,
rotary_base: tasks/pretraining.py). A phase's shapes are fixed, so its train step
compiles once, and each phase starts its own data stream at its own batch size.

`batch_warmup_phases` writes the phases of a batch-size warmup (ModernBERT's, Warner et
al. 2024): a few smaller fixed batches for a given number of tokens, then the full one.
"""
from __future__ import annotations

from typing import Sequence, Union

import ml_collections

# The phase keys the loop reads; a task adds its own (tasks/pretraining.py PHASE_KEYS).
LOOP_KEYS = ("fraction", "batch_size")
# Model fields a phase may change that change what its params compute (a context
# extension's RoPE theta): its checkpoints record the phase's value, so that export and
# loading serve the model that was trained, not config.model's.
SERVED_FIELDS = ("rotary_base",)


def plan(config: ml_collections.ConfigDict, total_steps: int) -> list[tuple[int, int, dict]]:
  """[(first_step, end_step, phase)]: e.g. seq 128 for 90% of steps, then 512."""
  phases = [dict(p) for p in config.train.get("phases") or ()] or [{"fraction": 1.0}]
  out, start = [], 0
  for i, ph in enumerate(phases):
    end = total_steps if i == len(phases) - 1 else start + int(round(ph["fraction"] * total_steps))
    out.append((start, end, ph))
    start = end
  return out


def phase_of(steps_plan, step: int) -> int:
  """The index of the phase that runs step index `step` (0-based: the step after `step`
  steps are done); an empty phase (fewer steps than one) is never it."""
  for i, (start, end, _) in enumerate(steps_plan):
    if start <= step < end:
      return i
  return len(steps_plan) - 1


def batch_size(tc: ml_collections.ConfigDict, phase: dict) -> int:
  """The global batch of `phase` (train.batch_size unless it sets its own)."""
  return int(phase.get("batch_size", tc.batch_size))


def served_model(config: ml_collections.ConfigDict, task, phase: int):
  """The task's model config as phase `phase` trains it (SERVED_FIELDS it sets)."""
  phases = [dict(p) for p in config.train.get("phases") or ()]
  fields = phases[phase] if 0 <= phase < len(phases) else {}
  changes = {k: fields[k] for k in SERVED_FIELDS if k in fields}
  return task.model_config.replace(**changes) if changes else task.model_config


def stream_start(tc: ml_collections.ConfigDict, steps_plan, i: int, length_of) -> int:
  """Examples that the phases before phase i reading the same data (the same
  length_of(phase), the task's sequence length) took from it: phase i's stream starts
  there, so a batch warmup's stages go on through the data instead of each reading its
  beginning again. A phase of another length reads other rows: its stream starts at 0."""
  length = length_of(steps_plan[i][2])
  return sum((end - start) * batch_size(tc, ph) for start, end, ph in steps_plan[:i]
             if length_of(ph) == length)


def eval_batch_size(tc: ml_collections.ConfigDict, steps_plan, i: int, length_of) -> int:
  """The global batch of phase i's evaluations: the largest of the phases of its length,
  so every stage of a batch warmup scores the same examples (train.eval_steps counts
  batches) and its metrics compare; an eval step holds no gradients, so it fits."""
  length = length_of(steps_plan[i][2])
  return max(batch_size(tc, ph) for _, _, ph in steps_plan if length_of(ph) == length)


def check(tc: ml_collections.ConfigDict, data_parallel: int, mesh_shape) -> None:
  """One ValueError naming the field, before any data is prepared: train.batch_size or a
  phase's batch_size that is not a positive multiple of the data-parallel devices (each
  device's rows would differ), or phase fractions the run's steps cannot hold."""
  sizes = [("train.batch_size", tc.batch_size)]
  phases = [dict(p) for p in tc.get("phases") or ()]
  sizes += [(f"train.phases[{i}].batch_size", p["batch_size"])
            for i, p in enumerate(phases) if "batch_size" in p]
  accum = int(tc.get("grad_accum_steps") or 1)
  for name, size in sizes:
    if not isinstance(size, int) or size <= 0 or size % data_parallel:
      raise ValueError(f"{name}={size!r} must be a positive multiple of the {data_parallel} "
                       f"data-parallel devices (config.mesh_shape resolved to "
                       f"{tuple(mesh_shape)}).")
    if size % accum:  # else found when the phase's step is first traced (train/steps.py)
      raise ValueError(f"{name}={size} does not split into train.grad_accum_steps={accum} "
                       "microbatches.")
  for i, p in enumerate(phases[:-1]):  # the last phase takes the rest: its own is unused
    f = p.get("fraction")
    if not isinstance(f, (int, float)) or not 0 <= f <= 1:
      raise ValueError(f"train.phases[{i}].fraction={f!r}; expected a number in [0, 1] (the "
                       "share of train.num_steps; the last phase takes the rest).")
  head = sum(p["fraction"] for p in phases[:-1])
  if head > 1 + 1e-9:
    raise ValueError(f"train.phases fractions before the last sum to {head:g} > 1: the "
                     "phases would run past train.num_steps.")


def check_keys(phases, allowed: Sequence[str]) -> None:
  """ValueError naming the first phase key outside `allowed` (a misspelled key would
  otherwise be ignored: a phase that silently runs at the default length or theta)."""
  for i, p in enumerate(phases or ()):
    unknown = sorted(set(dict(p)) - set(allowed))
    if unknown:
      raise ValueError(f"train.phases[{i}] has unknown key(s) {unknown}; allowed: "
                       f"{', '.join(allowed)}.")


def batch_warmup_phases(batch_size: int, seq_len: int, warmup_tokens: float,
                        stages: Union[int, Sequence[int]], total_steps: int,
                        fraction: float = 1.0, **fields) -> tuple[dict, ...]:
  """Phases that ramp the global batch through `stages` fixed sizes for about
  `warmup_tokens` tokens, then train at `batch_size` (ModernBERT's batch-size warmup).

  Args:
    batch_size: the full global batch (train.batch_size).
    seq_len: tokens per row (the phases' max_seq_length), to count tokens.
    warmup_tokens: tokens the warmup stages consume together, an equal share each.
    stages: k (the sizes batch_size / 2^k, ..., batch_size / 2) or the sizes themselves.
    total_steps: train.num_steps, to turn each stage's steps into its `fraction`.
    fraction: the share of total_steps these phases cover (1: the whole run; less when
      more phases follow, e.g. a context extension).
    **fields: keys every returned phase carries (max_seq_length, max_predictions_per_seq,
      rotary_base, ...).

  Returns:
    len(stages) + 1 phases for config.train.phases: each stage runs round(share /
    (size x seq_len)) steps (at least one), the last phase the rest of `fraction`.

  `batch_warmup_phases(4096, 1024, 2**30, 2, 10_000)`: 1,024 rows for 512 steps, 2,048 for
  256 (2^29 tokens each), then 4,096 for the other 9,232 steps.
  """
  if isinstance(stages, int):
    if stages < 1 or batch_size % 2**stages:
      raise ValueError(f"stages={stages}: batch_size={batch_size} must split into "
                       f"batch_size / 2^{stages} rows (or pass the stage sizes).")
    stages = [batch_size // 2**k for k in range(stages, 0, -1)]
  sizes = [int(s) for s in stages]
  if not sizes or not all(0 < s < batch_size for s in sizes):
    raise ValueError(f"stages={list(stages)}: expected sizes in (0, batch_size={batch_size}).")
  if not warmup_tokens > 0 or seq_len <= 0 or total_steps <= 0:
    raise ValueError(f"warmup_tokens={warmup_tokens}, seq_len={seq_len}, total_steps="
                     f"{total_steps}: expected positive numbers.")
  steps = [max(1, int(round(warmup_tokens / len(sizes) / (s * seq_len)))) for s in sizes]
  left = int(round(fraction * total_steps)) - sum(steps)
  if left < 1:
    raise ValueError(f"warmup_tokens={warmup_tokens:g} takes {sum(steps)} warmup steps, not "
                     f"fewer than the {int(round(fraction * total_steps))} steps the phases "
                     "cover: lower it or raise total_steps / fraction.")
  return tuple(dict(fields, fraction=n / total_steps, batch_size=s)
               for n, s in zip(steps, sizes)) + (
                   dict(fields, fraction=left / total_steps, batch_size=batch_size),)
