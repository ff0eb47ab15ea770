"""Our side of bench/time_to_quality/time_to_quality.py: a pretraining config trained against a clock.

Started by the driver with our venv's python, never run by hand:

  .venv/bin/python bench/time_to_quality/ours_worker.py --spec SPEC.json

SPEC: `config` (path:arg, e.g. configs/bert_tiny.py:demo), `overrides` ({dotted key:
value}, data.data_dir among them), `masked` (the scorer's fixed set for this config's
vocabulary, bench/time_to_quality/scorer.py), `curve` (a jsonl file: one row per checkpoint),
`budget_s`, `every_s`, `max_steps` (0: the config's num_steps), `fit_steps` (num_steps =
the measured steps/s x (budget - the compile), warmup in the config's proportion),
`interleave` (pause for the driver before the clock starts and at every score point:
bench_util.pause).

The run is train/loop.py's, step for step: PretrainingTask, make_optimizer over the
config's num_steps (its warmup and decay as configured), the state from
create_sharded_state, the steps from jit_steps, the task's train iterator. What differs is
only the stop and the checkpoints: training stops at `budget_s` of training wall clock or
at the end of the config's schedule (or `max_steps`); every `every_s` of training clock
(and at step 0 and at the stop) the params are scored on the fixed masked set with the
clock paused. The training clock starts before the first step, so it holds the steps'
compile (what a user waits for) and the data loader; state creation and data preparation
(cached) are off it. The worker settles the platform as the training CLI does
(hardware.configure).

Answers one JSON line: steps, training seconds, real (non-padding) tokens, tokens/s over
the whole clock and over the steps after the first two (compile excluded), why it stopped.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
import time

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/
import bench_util  # noqa: E402  pylint: disable=wrong-import-position
import scorer as ttq_scorer  # noqa: E402  pylint: disable=wrong-import-position
from bert_jax import hardware  # noqa: E402  pylint: disable=wrong-import-position

hardware.configure()  # as `python -m bert_jax.main` runs

PROG = "ttq_ours_worker"
PREDICT_BATCH = 64
PROBE_WARMUP = 3  # untimed first steps of the fit_steps probe (the first: the compile)
PROBE_STEPS = 24  # its timed steps, as bench/time_to_quality/hf_worker.py's (~4 s at bert_tiny sizes)


def load_config(value: str, overrides: dict):
  path, _, arg = value.partition(":")
  spec = importlib.util.spec_from_file_location("ttq_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config(arg or None)
  with config.unlocked():
    for key, value in overrides.items():
      node = config
      *parents, leaf = key.split(".")
      for p in parents:
        node = node[p]
      node[leaf] = value  # JSON-typed: ConfigDict checks the type
  return config


def scoring_batches(masked: dict, nsp: bool):
  """The masked set as our pretraining batches, padded to whole PREDICT_BATCH batches
  (one compile); padding rows have weight 0 and are cut from the predictions."""
  np = sys.modules["numpy"]
  n = len(masked["input_ids"])
  pad = -n % PREDICT_BATCH
  grow = lambda x: np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)])
  m = {k: grow(v) for k, v in masked.items()}
  mask = m["attention_mask"]
  batch = dict(input_ids=m["input_ids"], input_mask=mask,
               # NSP rows: token types 0 for `[CLS] A [SEP]`; packed rows: one fragment, 1.
               segment_ids=np.zeros_like(mask) if nsp else mask,
               masked_lm_positions=m["positions"], masked_lm_ids=m["labels"],
               masked_lm_weights=m["weights"],
               next_sentence_labels=np.zeros((n + pad,), np.int32))
  return n, [{k: v[i:i + PREDICT_BATCH] for k, v in batch.items()}
             for i in range(0, n + pad, PREDICT_BATCH)]


def main():
  spec = bench_util.read_spec(PROG)
  bench_util.claim_stdout()
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_jax.runtime import parallel  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.pretraining import PretrainingTask  # pylint: disable=g-import-not-at-top
  from bert_jax.train import optim  # pylint: disable=g-import-not-at-top
  from bert_jax.train.loop import create_sharded_state, jit_steps  # pylint: disable=g-import-not-at-top

  config = load_config(spec["config"], spec["overrides"])
  tc = config.train
  task = PretrainingTask(config)
  task.prepare(spec["workdir"])
  mesh = parallel.create_mesh(tuple(config.mesh_shape))
  phase = dict((tc.get("phases") or [{}])[0])
  dummy = task.dummy_batch(tc.batch_size, **task.phase_shapes(phase))
  to_global = functools.partial(parallel.host_to_global, mesh=mesh)

  def build(total: int):
    """(state, p_train, schedule, train_iter) of a run of `total` steps, as the loop."""
    tx, schedule = optim.make_optimizer(tc, total)
    with mesh:
      state, state_sh, _ = create_sharded_state(task, tx, mesh, dummy, config.seed)
    p_train, _ = jit_steps(task, tx, schedule, tc, state_sh, mesh)
    return state, p_train, schedule, task.train_iterator(phase, int(tc.batch_size), 0, 1,
                                                         config.seed)

  def advance(p_train, train_iter, state, prev):
    """One step of the loop: (state, metrics, real tokens of its batch). It dispatches the
    step, then waits for the previous one (`prev`, its metrics): the clock then reads the
    device's progress, not how far ahead async dispatch queued the host (checkpoints were
    skipped that way), and one step still overlaps the next batch's loading."""
    batch = next(train_iter)
    state, metrics = p_train(state, to_global(batch))
    if prev is not None:
      jax.block_until_ready(prev)
    return state, metrics, int(batch["input_mask"].sum())

  if spec.get("fit_steps"):
    # The configs' step counts assume an idle machine's rate; fitted, the schedule
    # (warmup and decay, as configured in proportion) ends with the budget. The probe,
    # off the clock, measures the compile (on the clock in the run) and the step rate.
    # The probe runs the run's own loop (advance) for PROBE_STEPS steps after PROBE_WARMUP,
    # as many as bench/time_to_quality/hf_worker.py's. (4 steps after 2, dispatched without the
    # run's wait, fitted 1912 steps that ended at 340 s of a 360-s budget on the Intel
    # Xeon; 24 after 3 without the wait, 2132 of which 2020 fitted in the budget.)
    state, p_train, _, it = build(int(tc.num_steps))
    with mesh:
      t0, metrics = time.perf_counter(), None
      for i in range(PROBE_WARMUP + PROBE_STEPS):
        state, metrics, _ = advance(p_train, it, state, metrics)
        if i == 0:  # the compile and one step
          jax.block_until_ready(state)
          compile_s = time.perf_counter() - t0
        elif i == PROBE_WARMUP - 1:  # then PROBE_STEPS steps timed
          jax.block_until_ready(state)
          t1 = time.perf_counter()
      jax.block_until_ready(state)
    per_s = PROBE_STEPS / (time.perf_counter() - t1)
    fitted = max(10, int(per_s * (float(spec["budget_s"]) - compile_s)))
    with config.unlocked():
      if not tc.get("warmup_fraction"):
        tc.warmup_steps = int(round(tc.warmup_steps * fitted / tc.num_steps))
      tc.num_steps = fitted
    del state, p_train, it
  total = int(tc.num_steps)
  stop_at = min(total, int(spec.get("max_steps") or total))
  state, p_train, schedule, train_iter = build(total)

  masked = ttq_scorer.load(spec["masked"])
  n_rows, score_batches = scoring_batches(masked, task.nsp)
  predict = jax.jit(lambda p, b: task.apply(p, b, None, train=False)["mlm_logits"].argmax(-1))
  curve = open(spec["curve"], "w", encoding="utf-8")

  def score(step: int, seconds: float, tokens: int) -> None:
    if not spec.get("score", True):  # a timed window only
      return
    preds = np.concatenate([np.asarray(predict(state.params, to_global(b)))
                            for b in score_batches])[:n_rows]          # [N, P]
    acc = ttq_scorer.accuracy(preds, masked)
    curve.write(json.dumps({"step": step, "seconds": seconds, "tokens": tokens,
                            "accuracy": acc,
                            "learning_rate": float(schedule(max(step - 1, 0)))}) + "\n")
    curve.flush()

  # Interleaved (the driver's default): built and probed while the other runs wait,
  # the run waits for the driver before its clock starts and at each score point, so
  # the runs take turns on the cores in slices of `every_s` (time_to_quality.py).
  interleave = spec.get("interleave", False)
  if interleave:
    bench_util.pause({"ready": True, "num_steps": total})
  with mesh:
    score(0, 0.0, 0)
    budget, every = float(spec["budget_s"]), float(spec["every_s"])
    step, tokens, paused, metrics = 0, 0, 0.0, None
    steady = None  # (seconds, tokens) after step 2: the compile is behind us
    next_score = every
    t0 = time.perf_counter()
    clock = lambda: time.perf_counter() - t0 - paused
    while True:
      state, metrics, n = advance(p_train, train_iter, state, metrics)
      tokens += n
      step += 1
      if step == 2:
        jax.block_until_ready(state)
        steady = (clock(), tokens)
      done = step >= stop_at or clock() >= budget
      if done or clock() >= next_score:
        jax.block_until_ready(state)
        now = clock()
        stop = time.perf_counter()
        score(step, now, tokens)
        if interleave and not done:  # its turn ends; the wait is off the clock too
          bench_util.pause({"step": step, "seconds": now, "tokens": tokens})
        paused += time.perf_counter() - stop
        while next_score <= now:
          next_score += every
      if done:
        break
  curve.close()
  seconds = clock()
  reason = "budget" if seconds >= budget else ("max_steps" if step < total else
                                              "schedule end")
  rate = (tokens - steady[1]) / max(seconds - steady[0], 1e-9) if steady and step > 2 else 0.0
  bench_util.reply({"steps": step, "seconds": seconds, "tokens": tokens,
                    "tokens_per_s": tokens / max(seconds, 1e-9),
                    "steady_tokens_per_s": rate, "stopped": reason,
                    "batch_size": int(tc.batch_size), "num_steps": total,
                    "versions": f"jax {jax.__version__}"})


if __name__ == "__main__":
  main()
