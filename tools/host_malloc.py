"""Host allocator settings for XLA:CPU's fresh host buffers (bert_jax/hardware/host_malloc.py).

  .venv/bin/python bench/host_malloc.py [--rounds 3] [--steps 12] [--idle 10]
      [--step finetune|base] [--settings "glibc.malloc.hugetlb=0;glibc.malloc.hugetlb=1"]

Each round starts one child process per GLIBC_TUNABLES setting (`;`-separated; the
settings interleaved, so all see the same machine load), and each child times:
* an elementwise op over 22.7M float32s (all-MiniLM-L6-v2's parameter count, 87 MiB)
  into a fresh output buffer, and the same op donated (in place), best of 3 x 20 calls;
* a train step, 3 untimed steps, then the median and the fastest of --steps: `finetune`,
  the packed fine-tuning step of bench/finetune_profile.py (all-MiniLM-L6-v2, 7 rows of
  128 holding 31.2 examples, the loop's own jitted step), or `base`, bench/
  pretrain_profile.py's `:bert` step at BERT-base's sizes (batch 8 x 128);
* with --idle S > 0: the same step after S seconds of sleep, twice (the step a run takes
  after an evaluation, a checkpoint or a data stall leaves its buffers freed for a while).
Prints one line per child and the medians per setting; the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_util  # noqa: E402  pylint: disable=wrong-import-position

SETTINGS = ("glibc.malloc.hugetlb=0", "glibc.malloc.hugetlb=1")
NUM_FLOATS = 22_713_986


def _best_ms(fn, arg, donate: bool) -> float:
  import jax  # pylint: disable=g-import-not-at-top
  x = fn(arg)
  best = float("inf")
  for _ in range(3):
    t0 = time.perf_counter()
    for _ in range(20):
      y = fn(x if donate else arg)
      if donate:
        x = y
    jax.block_until_ready(y)
    best = min(best, (time.perf_counter() - t0) / 20)
  return 1e3 * best


def _step(kind: str, tmp: str):
  """(step function of no arguments, examples or real tokens a step)."""
  import finetune_profile  # pylint: disable=g-import-not-at-top
  import pretrain_profile  # pylint: disable=g-import-not-at-top
  if kind == "base":
    config = os.path.join(bench_util.ROOT, "configs", "bert_tiny.py") + ":bert"
    return pretrain_profile.build(argparse.Namespace(
        config=config, sizes="base", batch=8, data_dir="~/bert_jax_data"))
  return finetune_profile.build(argparse.Namespace(length=128, variant="default"), tmp)


def child(steps: int, kind: str = "finetune", idle: float = 0.0) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  op = lambda a: a * 1.0001 + 0.5
  x = jnp.ones((NUM_FLOATS,), jnp.float32)
  out = {"fresh_ms": _best_ms(jax.jit(op), x, False),
         "in_place_ms": _best_ms(jax.jit(op, donate_argnums=0), jnp.copy(x), True)}
  del x
  with tempfile.TemporaryDirectory() as tmp:
    step, examples = _step(kind, tmp)

    def timed() -> float:
      t0 = time.perf_counter()
      jax.block_until_ready(step())
      return 1e3 * (time.perf_counter() - t0)
    for _ in range(3):
      timed()
    times = [timed() for _ in range(steps)]
    after_idle = []
    for _ in range(2 if idle > 0 else 0):
      time.sleep(idle)
      after_idle.append(timed())
  out.update(step_median_ms=statistics.median(times), step_min_ms=min(times),
             after_idle_ms=after_idle, examples=examples)
  return out


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--steps", type=int, default=12)
  p.add_argument("--step", choices=("finetune", "base"), default="finetune")
  p.add_argument("--idle", type=float, default=0.0,
                 help="seconds of sleep before each of two more timed steps (0: none)")
  p.add_argument("--settings", default=";".join(SETTINGS),
                 help="GLIBC_TUNABLES values to compare, separated by ';'")
  p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args()
  if args.child:
    print(json.dumps(child(args.steps, args.step, args.idle)))
    return
  print(f"host_malloc: {bench_util.load_line('before')}", flush=True)
  settings = [s for s in args.settings.split(";") if s]
  results = {s: [] for s in settings}
  for r in range(args.rounds):
    for setting in settings:
      env = bench_util.child_env(GLIBC_TUNABLES=setting)
      res = bench_util.run_json([sys.executable, os.path.abspath(__file__), "--child",
                                 "--steps", str(args.steps), "--step", args.step,
                                 "--idle", str(args.idle)], f"child {setting}", env=env)
      results[setting].append(res)
      idle = (f"; after {args.idle:g} s idle " + ", ".join(f"{t:.0f}" for t in
              res["after_idle_ms"]) + " ms") if res["after_idle_ms"] else ""
      print(f"round {r + 1}, {setting}: fresh 87 MiB output {res['fresh_ms']:.1f} ms, in "
            f"place {res['in_place_ms']:.1f} ms; {args.step} step median "
            f"{res['step_median_ms']:.0f} ms, fastest {res['step_min_ms']:.0f} ms "
            f"({res['examples']:.1f} a step){idle}", flush=True)
  for setting, rs in results.items():
    med = lambda k: statistics.median(r[k] for r in rs)
    print(f"{setting}: medians over {len(rs)} rounds: fresh {med('fresh_ms'):.1f} ms, in place "
          f"{med('in_place_ms'):.1f} ms, step {med('step_median_ms'):.0f} ms "
          f"({rs[0]['examples'] / med('step_median_ms') * 1e3:.1f} a second)")
  print(f"host_malloc: {bench_util.load_line('after')}")


if __name__ == "__main__":
  main()
