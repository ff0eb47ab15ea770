"""Our packed fine-tuning train step op by op (issue 39's "what limits it"): where a step of
bench/finetune/vs_trainer.py's `packed` system goes on this CPU.

  .venv/bin/python tools/finetune_profile.py [--length 128] [--steps 3] [--top 25]
      [--variant default|no_dropout|no_attention_dropout|bf16_matmuls]

Builds the task exactly as `python -m bert_jax.main --config configs/
finetune_classification.py:polarity` does with the sources set (bench/finetune/source_sentences.py)
and data.packing=True at --length, the batch in rows that holds 32 examples on average
(finetune_vs_trainer.rows_for), the state and jitted steps through train/loop.py's own
helpers; runs 3 untimed steps, times --steps steps, then traces --steps more under
`jax.profiler.trace` and sums XLA:CPU's per-thunk events by the jax op they come from
(tools/decode_profile.py's HLO tagging: "matmul" if the thunk's computation holds a dot).
Categories: dense matmuls (the Dense layers' kernels, forward and both backward
products), attention matmuls (q.k and p.v, per head), dropout (random bits + masks),
optimizer (the AdamW update, the clip, the non-finite guard), everything else by name.
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The root, bench/ (bench_util) and the suites whose parts the probes reuse.
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "bench")] + [
    os.path.join(_ROOT, "bench", d) for d in ("time_to_quality", "finetune", "inference")]

VARIANTS = {"default": {}, "no_dropout": {"model.dropout_rate": 0.0,
                                          "model.attention_dropout_rate": 0.0},
            "no_attention_dropout": {"model.attention_dropout_rate": 0.0},
            "bf16_matmuls": {"model.matmul_dtype": "bfloat16"}}


def category(src: str, is_dot: bool) -> str:
  """The bucket of one jax op (its op_name with the layer number dropped)."""
  s = src.lower()
  last = s.rsplit("/", 1)[-1]
  if s.startswith("cond/") or any(k in s for k in ("adam", "optax", "clip", "global_norm",
                                                   "apply_updates", "isfinite")):
    return "optimizer (AdamW update under the non-finite guard's cond, clip)"
  if is_dot:
    return "attention matmul (q.k, p.v)" if "->" in s else "dense matmul"
  if "token_embedder" in s or "embed" in s and ("scatter" in last or "broadcast" in last):
    return "embedding table gradient"
  if any(k in s for k in ("random", "threefry", "dropout", "bits", "while/body")) or (
      "attention/stack" in s or "shift_right" in last or last in ("and", "lt")):
    return "dropout (random bits, masks)"
  if "softmax" in s or last in ("exp", "reduce_max") or "log" in last:
    return "softmax"
  if "layernorm" in s or "layer_norm" in s or "_norm/" in s or "rsqrt" in s:
    return "layer norm"
  if "gelu" in s or "erf" in last or "tanh" in last:
    return "gelu"
  return "other"


def print_buckets(per_cat: collections.Counter) -> None:
  """The buckets' ms a step and shares, largest first, as a markdown table (both sides)."""
  total = sum(per_cat.values())
  print("| bucket | ms a step | share |\n| --- | --- | --- |")
  for cat, ms in per_cat.most_common():
    print(f"| {cat} | {ms:.1f} | {100 * ms / total:.1f}% |")


def loop_step(task, c, num_batches: int):
  """(step function of no arguments, its batches) for a prepared task and its config:
  the optimizer over the config's steps, the state and the jitted train step through
  train/loop.py's own helpers on one device, cycling over `num_batches` batches of the
  task's train iterator (also tools/pretrain_profile.py's)."""
  import jax
  from bert_jax.runtime import parallel
  from bert_jax.train import loop, optim
  total, _, _ = loop._step_counts(c.train, task)  # pylint: disable=protected-access
  tx, schedule = optim.make_optimizer(c.train, total)
  mesh = parallel.create_mesh((1, 1, 1), jax.devices()[:1])
  dummy = task.dummy_batch(c.train.batch_size, **task.phase_shapes({}))
  with jax.set_mesh(mesh):
    state, state_sh, _ = loop.create_sharded_state(task, tx, mesh, dummy, c.seed)
  p_train, _ = loop.jit_steps(task, tx, schedule, c.train, state_sh, mesh)
  it = task.train_iterator({}, c.train.batch_size, 0, 1, c.seed)
  batches = [jax.device_put(next(it)) for _ in range(num_batches)]
  holder = {"state": state, "i": 0}

  def step():
    with jax.set_mesh(mesh):
      holder["state"], m = p_train(holder["state"], batches[holder["i"] % len(batches)])
    holder["i"] += 1
    return m
  return step, batches


def build(args, tmp: str):
  """(step function of no arguments, examples a step) for the packed task."""
  import vs_trainer as fvt
  import source_sentences
  from bert_jax.tasks import registry
  data = source_sentences.build()
  fvt_args = argparse.Namespace(data_overrides=source_sentences.write_csv(data, tmp),
                                batch=32, epochs=1.0)
  rows, per_row = fvt.rows_for(fvt_args, args.length, tmp)
  overrides = {**fvt.our_overrides(fvt_args, args.length, True, rows, 0),
               **VARIANTS[args.variant]}
  c = fvt.configured(overrides)
  task = registry.get_task(c)
  task.prepare(os.path.join(tmp, "work"))
  step, _ = loop_step(task, c, num_batches=4)
  return step, rows * per_row


def profile(step, steps: int):
  """(seconds a step untraced, ms a step by bucket, ms a step by (op, is_dot)) of `step`
  (a function of no arguments running one jitted train step): 3 untimed calls, `steps`
  timed, `steps` more traced; the process must have been started under
  decode_profile.with_hlo_dump (the HLO names each thunk's jax op)."""
  import decode_profile
  import jax
  for _ in range(3):
    jax.block_until_ready(step())
  t0 = time.perf_counter()
  for _ in range(steps):
    jax.block_until_ready(step())
  wall = (time.perf_counter() - t0) / steps
  ops = {}
  for f in glob.glob(os.path.join(os.environ["XLA_DUMP"], "*wrapped*after_optimizations.txt")):
    with open(f, encoding="utf-8") as fh:
      ops.update(decode_profile._hlo_ops(fh.read()))  # pylint: disable=protected-access
  with tempfile.TemporaryDirectory() as trace_dir:
    jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
    for _ in range(steps):
      jax.block_until_ready(step())
    jax.profiler.stop_trace()
    path = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)[0]
    events = [e for e in json.load(gzip.open(path))["traceEvents"]
              if e.get("ph") == "X" and e["name"] in ops]
  per_cat, per_src = collections.Counter(), collections.Counter()
  for e in events:
    src, is_dot, _ = ops[e["name"]]
    per_cat[category(src, is_dot)] += e["dur"] / 1e3 / steps
    per_src[(src, is_dot)] += e["dur"] / 1e3 / steps
  return wall, per_cat, per_src


def print_ops(per_src: collections.Counter, top: int) -> None:
  """The `top` costliest jax ops (all layers together), as a markdown table."""
  print("| op (all layers) | matmul | ms a step |\n| --- | --- | --- |")
  for (src, is_dot), ms in per_src.most_common(top):
    print(f"| `{src[-90:]}` | {'yes' if is_dot else ''} | {ms:.1f} |")


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--length", type=int, default=128)
  p.add_argument("--steps", type=int, default=3)
  p.add_argument("--top", type=int, default=25)
  p.add_argument("--variant", choices=sorted(VARIANTS), default="default")
  args = p.parse_args()
  import decode_profile
  decode_profile.with_hlo_dump("finetune_hlo_")
  print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
  with tempfile.TemporaryDirectory() as tmp:
    step, examples = build(args, tmp)
    wall, per_cat, per_src = profile(step, args.steps)
  print(f"packed {args.length}, variant {args.variant}: {examples:.1f} examples a step; "
        f"{1e3 * wall:.1f} ms a step untraced ({examples / wall:.1f} examples/s); op time "
        f"{sum(per_cat.values()):.1f} ms a step (summed over XLA's threads)")
  print_buckets(per_cat)
  print_ops(per_src, args.top)
  print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
