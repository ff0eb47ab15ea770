"""train_and_evaluate: mesh, sharded state, restore-or-init, the step loop, eval, saves.

The task arrives built (tasks/registry.py), and the loop relies only on the Protocol
of tasks/base.py (this package never imports tasks/). Sections: (1) mesh, optimizer;
(2) abstract state -> shardings -> sharded init; (3) restore (workdir checkpoint ->
init_from -> scratch); (4) jit the steps once; (5) the loop with metrics, eval,
checkpoints and preemption; (6) the final summary.
"""
from __future__ import annotations

import contextlib
import functools
import os
import time

import flax.linen as nn
import jax
import ml_collections
import numpy as np

from bert_jax.checkpoint import manager as ckpt_lib
from bert_jax.runtime import multihost
from bert_jax.runtime import parallel
from bert_jax.runtime import progress
from bert_jax import kernels
from bert_jax.train import mfu
from bert_jax.train import optim, steps, wandb_run
from bert_jax.train import phases as phases_lib
from bert_jax.train import profile as profile_lib
from bert_jax.train.preemption import Preemption, log_stop
from bert_jax.train.writer import MetricWriter, MetricsWriteError, eval_report, log, progress_line


class NonFiniteLossError(FloatingPointError):
  """The loss or gradient norm became NaN/inf."""


@contextlib.contextmanager
def _saves_finish_first(ckpt):
  """A metrics.jsonl write that finds the disk full (MetricsWriteError) or a damaged
  record met mid-run (data.mirror.CorruptDataError, a ValueError) ends the run with one
  line from main: the checkpoint save under way finishes first (or fails as its own
  one-line CheckpointSaveError), so no finished step is lost with it."""
  try:
    yield
  except (MetricsWriteError, ValueError):
    ckpt.wait()
    raise


_phase_plan, _phase_of = phases_lib.plan, phases_lib.phase_of


def abstract_state(task, tx, mesh, dummy_batch, seed: int):
  """(init_fn, key, state_shardings, abstract_state) without materializing anything.

  eval_shape gives the boxed abstract state; its logical names become NamedShardings
  through the rules table. Shared by the loop and bert_jax/aot (which compiles for a
  TPU topology it does not have), so both see the same state and shardings.
  """
  def init_fn(key):
    params_key, state_key = jax.random.split(key)
    params = task.init(params_key, dummy_batch)["params"]   # boxed with logical names
    return steps.create_state(params, tx, state_key)          # opt state inherits the boxes

  key = jax.random.key(seed)
  abstract, shardings = parallel.sharded_abstract(jax.eval_shape(init_fn, key), mesh)
  return init_fn, key, shardings, abstract


def create_sharded_state(task, tx, mesh, dummy_batch, seed: int):
  """(state, state_shardings, abstract_state): built already sharded, never whole on one
  device: jit(init, out_shardings) materializes each shard in place."""
  init_fn, key, shardings, abstract = abstract_state(task, tx, mesh, dummy_batch, seed)
  state = jax.jit(init_fn, out_shardings=shardings)(key)
  return nn.unbox(state), shardings, abstract


def jit_steps(task, tx, schedule, tc, state_sh, mesh):
  """(p_train, p_eval): the steps jitted with the state's shardings (train donates it),
  traced on `mesh` so the models' activation constraints apply (parallel.constrain)."""
  p_train = jax.jit(
      parallel.traced_on(mesh, functools.partial(steps.train_step, task=task, tx=tx,
                                                 schedule=schedule,
                                                 accum_steps=int(tc.grad_accum_steps))),
      in_shardings=(state_sh, None), out_shardings=(state_sh, None), donate_argnums=(0,))
  eval_fn = steps.predict_step if task.host_scored else steps.eval_step
  p_eval = jax.jit(parallel.traced_on(mesh, functools.partial(eval_fn, task=task)),
                   in_shardings=(state_sh.params, None))
  return p_train, p_eval


def _with_start(phase: dict, start: int) -> dict:
  """The phase as its task's train_iterator gets it: `stream_start`, where in its data
  its stream begins (phases_lib.stream_start), when it is not the beginning."""
  return dict(phase, stream_start=start) if start else phase


def _meta(config, task, phase: int) -> dict:
  import dataclasses  # pylint: disable=g-import-not-at-top
  return {"task": task.name, "phase": phase, "config": config.to_dict(),
          "model_config": dataclasses.asdict(phases_lib.served_model(config, task, phase)),
          "tokenizer_dir": task.tokenizer_dir}


def _step_cost(task, phase: dict, batch_size: int) -> tuple[int, int, float]:
  """(sequences, tokens, model FLOPs) of one train step of `phase` at `batch_size`."""
  shapes = task.phase_shapes(phase)
  return (batch_size, batch_size * shapes["seq_len"],
          batch_size * task.flops_per_example(shapes["seq_len"], shapes["num_predictions"]))


class _Window:
  """The train steps since the last log line: their metrics, sequences, tokens and FLOPs.

  All are counted per step, so a window that spans a phase switch (another sequence
  length or batch size) reports each step at its own shape.
  """

  def __init__(self, t0: float):
    self.t0, self.metrics, self.seqs, self.tokens, self.flops = t0, [], 0, 0, 0.0

  def add(self, metrics, seqs: int, tokens: int, flops: float) -> None:
    self.metrics.append(metrics)
    self.seqs += seqs
    self.tokens += tokens
    self.flops += flops

  def rates(self, now: float, num_devices: int, peak: float) -> dict:
    """The window's perf/* scalars (model FLOPs per device over wall time)."""
    dt, n = now - self.t0, len(self.metrics)
    return {"perf/seq_per_sec": self.seqs / dt, "perf/tokens_per_sec": self.tokens / dt,
            "perf/step_time_s": dt / n,
            "perf/tflops_per_device": self.flops / dt / num_devices / 1e12,
            "perf/mfu": mfu.mfu(self.flops / n, dt / n, num_devices, peak)}


def _sum_trees(trees):
  return jax.tree_util.tree_map(lambda *xs: float(np.sum(xs)), *trees)


def evaluate(p_eval, task, params, iterator, num_batches: int, to_global) -> dict:
  """Runs eval_step over up to num_batches batches; ratios of the summed terms.

  A host-scored task (fine-tuning) gets its per-row outputs of the whole split instead
  (p_eval is then the jitted predict_step), scored on the host by the task's official
  metric definitions (accuracy, F1, MCC, seqeval F1, SQuAD EM/F1, ...).
  """
  results = []
  bar = progress.bar(desc="eval", total=num_batches or None, unit="batch",
                     show=jax.process_index() == 0)
  for i, batch in enumerate(iterator):
    if num_batches and i >= num_batches:
      break
    results.append(p_eval(params, to_global(batch)))
    bar.update()
  bar.close()
  if not results:
    return {}
  if task.host_scored:
    rows = [_to_host(r) for r in results]
    outputs = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
    return {k: float(v) for k, v in task.host_metrics(outputs).items()}
  total = _sum_trees(jax.device_get(results))
  return {k: float(v) for k, v in task.metric_ratios(total).items()}


def _to_host(tree):
  """Global arrays -> numpy on every process (all-gathered across processes)."""
  if jax.process_count() == 1:
    return jax.device_get(tree)
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return multihost_utils.process_allgather(tree, tiled=True)


def _step_counts(tc, task) -> tuple[int, int, int]:
  """(total steps, eval every, checkpoint every). With train.num_epochs > 0 (fine-tuning)
  the run is counted in epochs of the task's data, and an eval/checkpoint interval of 0
  means once per epoch."""
  epochs = float(tc.get("num_epochs", 0) or 0)
  if not epochs:
    return int(tc.num_steps), int(tc.eval_every), int(tc.checkpoint_every)
  per_epoch = task.steps_per_epoch(tc.batch_size)
  return (max(1, int(round(epochs * per_epoch))), int(tc.eval_every or per_epoch),
          int(tc.checkpoint_every or per_epoch))


def check_counts(tc) -> None:
  """One ValueError naming a train setting the loop cannot run with, before any data is
  prepared: log/checkpoint intervals or grad_accum_steps of 0 were ZeroDivisionError
  tracebacks, num_steps <= 0 a run that trained nothing and said nothing, a negative
  learning rate gradient ascent. With num_epochs > 0 (fine-tuning) num_steps is unused
  and checkpoint_every / eval_every 0 mean once per epoch."""
  epochs = tc.get("num_epochs", 0) or 0
  least = {"num_epochs": 0, "log_every": 1, "grad_accum_steps": 1, "eval_every": 0,
           "eval_steps": 0, **({"checkpoint_every": 0} if epochs else
                               {"num_steps": 1, "checkpoint_every": 1})}
  for key, low in least.items():
    value = tc.get(key, low)
    if not isinstance(value, (int, float)) or value < low:
      raise ValueError(f"train.{key}={value!r}; expected a number >= {low}.")
  if not tc.learning_rate > 0:
    raise ValueError(f"train.learning_rate={tc.learning_rate!r}; expected a number > 0.")


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, task) -> dict:
  """Trains `task` (a tasks/base.py Task built from `config`) in `workdir`, resuming from
  its checkpoints. Returns the final metrics under their logged names (`train/loss`,
  `perf/mfu`, `eval/...`; train/writer.py) with `step` and `preempted`."""
  tc = config.train
  # ---------------------------------------------------------------- (1) setup
  mesh = parallel.create_mesh(parallel.fit_mesh_shape(tuple(config.mesh_shape),
                                                      jax.device_count(), log))
  # Rows by batch block, not by process: processes that share a block load the same rows.
  shards = parallel.row_shards(mesh)
  shard, nshards = shards.index, shards.count
  phases_lib.check(tc, parallel.data_parallel_size(mesh), mesh.shape.values())
  check_counts(tc)
  steps.check_precision(getattr(task, "model_config", None))
  wandb_run.check_available(config)
  # The task first: it refuses a workdir holding another run's tokenizer before this run
  # writes a metric line. W&B starts once the restore has accepted the workdir (below).
  task.prepare(workdir)
  writer = MetricWriter(workdir)
  total_steps, eval_every, checkpoint_every = _step_counts(tc, task)
  tx, schedule = optim.make_optimizer(tc, total_steps)
  plan = _phase_plan(config, total_steps)
  # Rows this process loads in phase i (each phase may set its own global batch size).
  host_batch = lambda i: phases_lib.batch_size(tc, plan[i][2]) // nshards
  length_of = lambda ph: task.phase_shapes(ph)["seq_len"]
  start_of = lambda i: phases_lib.stream_start(tc, plan, i, length_of)
  eval_batch = lambda i: phases_lib.eval_batch_size(tc, plan, i, length_of) // nshards
  train_iterator = lambda i: task.train_iterator(_with_start(plan[i][2], start_of(i)),
                                                 host_batch(i), shard, nshards, config.seed)

  to_global = functools.partial(parallel.host_to_global, mesh=mesh, shards=shards)

  # --------------------------------------------------- (2) sharded state
  dummy = task.dummy_batch(phases_lib.batch_size(tc, plan[0][2]),
                           **task.phase_shapes(plan[0][2]))
  with mesh:
    state, state_sh, abstract = create_sharded_state(task, tx, mesh, dummy, config.seed)

  # --------------------------------------------------- (3) restore or init
  ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"), keep=tc.keep_checkpoints,
                               async_save=tc.async_checkpoints,
                               best_metric=tc.get("best_metric") or None,
                               best_mode=tc.get("best_mode", "max"), row_shards=shards)
  start_step = 0
  latest = ckpt.latest_step(agreed=True)  # the same on every process
  phase = _phase_of(plan, latest or 0)
  train_iter = train_iterator(phase)
  if latest is not None:
    try:
      restored = ckpt.restore(abstract, data_iterator=train_iter)
    except ckpt_lib.CheckpointMismatchError as e:  # another model's workdir: say what differs
      raise ckpt_lib.another_run_error(e, ckpt.directory / str(latest),
                                       _meta(config, task, phase)) from None
    state, meta, got = restored
    start_step = int(jax.device_get(state.step))
    if meta.get("phase", phase) != _phase_of(plan, start_step):
      # Saved at a phase boundary: the new phase starts its own data stream.
      phase = _phase_of(plan, start_step)
      train_iter = train_iterator(phase)
    elif phase != _phase_of(plan, start_step):  # an older step than `latest` restored, of
      phase, position = _phase_of(plan, start_step), train_iter.get_state()  # another phase:
      train_iter = train_iterator(phase)  # its stream at its batch size, where it was saved
      train_iter.set_state(position)
    log(f"resumed from {ckpt.directory}/{got} at step {start_step}")
  elif config.get("init_from"):
    params = task.load_pretrained_params(config.init_from, state.params)
    state = state.replace(params=jax.device_put(params, state_sh.params))
    log(f"initialized params from {config.init_from}")
  # Records an interrupted run wrote past its last checkpoint are recomputed now: drop them.
  writer.resume_at(start_step)
  if writer.enabled:  # after the restore: another model's rerun never rewrites its config
    writer.wandb = wandb_run.start(config, workdir)
  phase = _phase_of(plan, start_step)
  if eval_every:  # fail now, not after hours of training, if there is nothing to eval on
    task.eval_iterator(plan[phase][2], eval_batch(phase), shard, nshards)

  # --------------------------------------------------- (4) compile steps
  p_train, p_eval = jit_steps(task, tx, schedule, tc, state_sh, mesh)

  peak = mfu.resolve_peak(float(tc.get("peak_flops_per_device") or 0.0),
                          dtype=mfu.peak_dtype(task.model_config, jax.default_backend()))
  n_params = sum(x.size for x in jax.tree_util.tree_leaves(abstract.params))
  log(f"task {task.name} | model {n_params / 1e6:.2f}M params | mesh "
      f"{dict(mesh.shape)} | {jax.device_count()} devices, {shards.describe()} | "
      f"steps {start_step}->{total_steps}")
  if start_step >= total_steps:  # a finished run again, or its num_steps lowered below it
    log(f"nothing to train: {ckpt.directory} is at step {start_step} and this run ends at "
        f"step {total_steps} (train.num_steps / num_epochs): raise it to train further, or "
        "use a new --workdir.")
  log(peak.describe())
  log(kernels.describe_phases(getattr(task, "model_config", None), tc.batch_size,
                                  [task.phase_shapes(p[2])["seq_len"] for p in plan], mesh))
  profiler = profile_lib.StepProfiler(workdir, int(tc.get("profile_steps", 0)),
                                      int(tc.get("profile_first_step", 0)), start_step, log)
  writer.write_text("config", "```\n" + config.to_json_best_effort(indent=1) + "\n```")
  writer.write_text("perf/mfu_peak", peak.describe())

  # --------------------------------------------------- (5) the loop
  window = _Window(time.perf_counter())
  last_eval, summary = {}, {}
  first_metrics = None
  loop_t0, loop_step0 = time.perf_counter(), start_step
  step = start_step
  step_cost = _step_cost(task, plan[phase][2], phases_lib.batch_size(tc, plan[phase][2]))
  # A signal stops every process at the same step: one process's own decision alone
  # left the others waiting in the next step's collectives (multihost.StopVote).
  several = jax.process_count() > 1
  agree = multihost.StopVote().cast if several else (lambda name: name)
  stopped_by, ahead = "", None
  with Preemption(agreed=several) as preempt, _saves_finish_first(ckpt), mesh:
    while step < total_steps:
      if _phase_of(plan, step) != phase:
        phase = _phase_of(plan, step)
        train_iter = train_iterator(phase)
        step_cost = _step_cost(task, plan[phase][2], phases_lib.batch_size(tc, plan[phase][2]))
        log(f"phase {phase}: {plan[phase][2]}")
      batch = to_global(next(train_iter))
      state, m = profiler.run(step + 1, p_train, state, batch)
      step += 1
      # The host at most one step ahead of the device (the last step's metrics ready before
      # this step's stop check): a signal is seen in the step in progress, not at the next
      # log step, up to which an unbounded host had queued its steps (issue 66).
      jax.block_until_ready(ahead)
      ahead = m
      stopped_by = agree(preempt.name)  # "" = go on (several processes: one step late)
      window.add(m, *step_cost)

      if step % tc.log_every == 0 or step == total_steps or stopped_by:
        got = jax.device_get(window.metrics)
        bad = [step - len(got) + i + 1 for i, x in enumerate(got) if x["finite"] < 1]
        if bad and not tc.skip_nonfinite:
          ckpt.wait()
          raise NonFiniteLossError(
              f"non-finite loss or gradient at step {bad[0]} (the state was not updated "
              f"by it; last good checkpoint: {ckpt.latest_step()} in {ckpt.directory}). "
              "Lower the learning rate, check the data, or set train.skip_nonfinite=True.")
        good = [x for x in got if x["finite"] >= 1] or got
        avg = {f"train/{k}": float(np.mean([x[k] for x in good]))
               for k in good[0] if k != "finite"}
        avg["train/skipped_steps"] = float(len(bad))
        avg.update(window.rates(time.perf_counter(), jax.device_count(), peak.flops))
        if first_metrics is None:
          first_metrics = dict(avg)
        writer.write_scalars(step, avg)
        rate = (step - loop_step0) / max(time.perf_counter() - loop_t0, 1e-9)
        log(progress_line(step, total_steps, avg, (total_steps - step) / max(rate, 1e-9),
                          task.progress_labels))
        summary = avg
        window = _Window(time.perf_counter())

      # Eval and saves are off the training clock: the next window's step time and
      # MFU measure training steps only.
      paused = time.perf_counter()
      scored_now = False
      if eval_every and (step % eval_every == 0 or step == total_steps):
        # At the phase's batch size: what fits at its length (eval_steps counts batches).
        eval_iter = task.eval_iterator(plan[phase][2], eval_batch(phase), shard, nshards)
        last_eval = evaluate(p_eval, task, state.params, eval_iter, tc.eval_steps, to_global)
        scored_now = bool(last_eval)
        if last_eval:
          writer.write_scalars(step, {f"eval/{k}": v for k, v in last_eval.items()})
          log(eval_report(step, last_eval))

      if not several:  # one process: a signal during this step's log or eval stops here
        stopped_by = preempt.name
      if step % checkpoint_every == 0 or step == total_steps or stopped_by:
        # Only a checkpoint scored at its own step carries metrics (and can be "best").
        ckpt.save(step, state, _meta(config, task, phase), train_iter,
                  metrics=last_eval if scored_now else None)
      window.t0 += time.perf_counter() - paused  # (the ETA's rate keeps them: real time)
      if stopped_by:
        preempt.stopping = True
        log_stop(stopped_by, step, ckpt.directory)
        break
    # Inside the handlers: a SIGTERM while the last (async) save finishes is noted, not
    # fatal, so the run still ends with that step saved and an exit status of 0.
    profiler.close()
    ckpt.close()
  if not several:
    stopped_by = preempt.name  # as before: a signal during the last step's save counts
  # --------------------------------------------------- (6) summary
  result = {"step": step, "preempted": bool(stopped_by), "stopped_by": stopped_by,
            **summary,
            **{f"eval/{k}": v for k, v in last_eval.items()}}
  if not stopped_by:  # a finished run: its config and final metrics side by side
    writer.write_hparams(config.to_dict(), {k: v for k, v in result.items() if "/" in k})
  writer.close()
  if first_metrics and summary:
    log("summary: " + ", ".join(
        f"{k} {first_metrics[f'train/{k}']:.4f} -> {summary[f'train/{k}']:.4f}"
        for k in task.summary_keys if f"train/{k}" in summary))
  return result
