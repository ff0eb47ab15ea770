"""What the CPU tuning buys a BERT-base pretraining step on this machine, interleaved.

Issue 62 kept a piece of CPU tuning only where it buys >= 10% of a BERT-base step here.
Three systems, in turns, each a fresh process timing the same float32 step (BERT's
recipe: dropout and attention dropout 0.1; batch x seq rows of synthetic MLM + NSP data,
the loop's own jitted train step, median of --steps after the compile):

  before   the tree at --before (3911aba): every CPU piece of the model path (threefry
           unrolled by size, 16-bit dropout, LayerNorm's closed-form gradient, the
           training-only erf GELU, the Dense layers' 2-D gradients)
  two_d    the tree at --two-d (181760e): the 2-D gradients alone, the rest removed
  now      this tree: no CPU tuning in the model path
  malloc   this tree under the glibc policy the training CLI used to restart itself with
           (GLIBC_TUNABLES=MALLOC below: huge pages, freed memory kept)

  python bench/train_step/cpu_tuning.py [--rounds 3 --steps 4 --batch 8 --seq 128]

now / before is what all of it bought together, now / two_d what the 2-D gradients
bought alone, now / malloc what the allocator policy buys. Writes
bench/results/cpu_tuning.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(BENCH)
sys.path[:0] = [BENCH]
import results_io  # noqa: E402  pylint: disable=g-import-not-at-top

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_tuning_worker.py")
MALLOC = ("glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:"
          "glibc.malloc.trim_threshold=68719476736")


def _run(tree: str, glibc: str | None, args, parts: str) -> dict:
  env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
  if glibc:
    env["GLIBC_TUNABLES"] = glibc
  out = subprocess.run([sys.executable, WORKER, tree, args.variant, str(args.batch),
                        str(args.seq), str(args.steps), parts], capture_output=True, text=True,
                       timeout=1800, check=False, env=env)
  lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
  if out.returncode or not lines:
    raise RuntimeError(f"worker failed ({tree}): "
                       f"{(out.stderr or out.stdout).strip().splitlines()[-1:]}")
  return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--before", default="3911aba")
  parser.add_argument("--two-d", default="181760e")
  parser.add_argument("--variant", default="bert/base")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--steps", type=int, default=4)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--no-write", action="store_true")
  args = parser.parse_args()
  load_before = results_io.load()
  with tempfile.TemporaryDirectory() as tmp:
    systems = {"before": (os.path.join(tmp, "before"), None),
               "two_d": (os.path.join(tmp, "two_d"), None), "now": (ROOT, None),
               "malloc": (ROOT, MALLOC)}
    for name, commit in (("before", args.before), ("two_d", args.two_d)):
      subprocess.run(["git", "-C", ROOT, "worktree", "add", "-q", "--detach",
                      systems[name][0], commit], check=True)
    try:
      times = {name: [] for name in systems}
      for r in range(args.rounds):
        for name, (tree, glibc) in systems.items():
          # --before's own bench/ matches its code; the others take today's bench/.
          res = _run(tree, glibc, args, os.path.join(tree if name == "before" else ROOT,
                                                     "bench"))
          times[name].append(res["step_s"])
          print(f"round {r + 1} {name:7s} step {res['step_s']:.3f} s  compile "
                f"{res['compile_s']:.1f} s  loss {res['loss']:.4f}", flush=True)
    finally:
      for name in ("before", "two_d"):
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force",
                        systems[name][0]], check=False)
  med = {k: statistics.median(v) for k, v in times.items()}
  all_of_it = med["now"] / med["before"]    # > 1: what every piece bought together
  two_d = med["now"] / med["two_d"]         # > 1: what the 2-D gradients bought alone
  malloc = med["now"] / med["malloc"]       # > 1: what the allocator policy buys
  print(f"median step: before {med['before']:.3f} s, two_d {med['two_d']:.3f} s, now "
        f"{med['now']:.3f} s, malloc {med['malloc']:.3f} s; now / before {all_of_it:.3f}, "
        f"now / two_d {two_d:.3f}, now / malloc {malloc:.3f}")
  figures = [results_io.figure(f"{k} step", round(v, 4), "s", f"median of {args.rounds} "
                               f"rounds x {args.steps} steps") for k, v in med.items()]
  figures += [results_io.figure("now / before", round(all_of_it, 3), "x",
                                "what every CPU piece bought together"),
              results_io.figure("now / two_d", round(two_d, 3), "x",
                                "what the 2-D dense gradients bought alone"),
              results_io.figure("now / malloc", round(malloc, 3), "x",
                                "what the training CLI's allocator policy bought")]
  res = results_io.result(
      "cpu_tuning", f"CPU tuning of the model path, {args.variant} step, "
      f"{args.batch} x {args.seq}, float32", figures,
      anchor=f"the same step at {args.before} (every CPU piece), at {args.two_d} (the "
             "2-D gradients alone) and under the allocator policy",
      headline=f"every model piece together {all_of_it:.2f}x, the 2-D gradients alone "
               f"{two_d:.2f}x, the allocator policy {malloc:.2f}x",
      goal_=results_io.goal("keep a piece only where it buys >= 10% of a BERT-base step "
                            "(met: none does, all removed)", "< 1.10 each",
                            max(all_of_it, two_d, malloc) < 1.10),
      load_before=load_before)
  if not args.no_write:
    print(results_io.write(res))


if __name__ == "__main__":
  main()
