"""The README's main command, `make demo`, as a suite: configs/bert_tiny.py:demo trained
in a fresh workdir, then bert_jax.demo_report, timed; the held-out accuracy and the
fill-mask answers next to the count baselines.

  python bench/time_to_quality/demo.py [--workdir /tmp/bench_demo] [--keep-data]

Runs what `make demo` runs (bert_jax.main, then bert_jax.demo_report) with this Python;
the venv and install of a fresh clone are not in its clock (the fresh-clone row's is).
The data directory is the config's default unless --data_dir is given; an empty or new
one puts preparation in the clock, and the result says which. Writes
bench/results/demo-accuracy.json.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(BENCH)
sys.path[:0] = [BENCH]
import results_io  # noqa: E402  pylint: disable=g-import-not-at-top

def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", default="/tmp/bench_demo")
  parser.add_argument("--data_dir", default=None, help="default: the config's")
  parser.add_argument("--no-write", action="store_true")
  args = parser.parse_args()
  if os.path.exists(args.workdir):  # a workdir would be resumed, not trained
    shutil.rmtree(args.workdir)
  data_dir = os.path.expanduser(args.data_dir or "~/bert_jax_data")  # the config's default
  fresh = not (os.path.isdir(data_dir) and os.listdir(data_dir))
  load_before = results_io.load()
  train = [sys.executable, "-m", "bert_jax.main", "--config", "configs/bert_tiny.py:demo",
           "--workdir", args.workdir]
  if args.data_dir:
    train.append(f"--config.data.data_dir={args.data_dir}")
  t0 = time.time()
  subprocess.run(train, cwd=ROOT, check=True, capture_output=True, text=True)
  trained_s = time.time() - t0
  report = subprocess.run([sys.executable, "-m", "bert_jax.demo_report", "--workdir",
                           args.workdir], cwd=ROOT, check=True, capture_output=True, text=True)
  total_s = time.time() - t0
  print(report.stdout)
  sys.path[:0] = [ROOT]
  from bert_jax import demo_report, hardware  # pylint: disable=g-import-not-at-top
  hardware.configure()  # as the CLIs: no TPU attempt on a machine without one
  with open(os.devnull, "w", encoding="utf-8") as null:
    got = demo_report.report(args.workdir, demo_report.DEMO_TEXTS, out=null)
  acc = got["accuracy"]
  top1 = " / ".join(masks[0][0][0] for masks in got["fills"])
  model, frequent, bigram = acc["model"], acc["most frequent"], acc["bigram"]
  quality = results_io.result(
      "demo", "Demo held-out accuracy",
      [results_io.figure("held-out MLM accuracy", round(model, 4)),
       results_io.figure("most frequent token", round(frequent, 4),
                         note=f"model {model / frequent:.2f}x it"),
       results_io.figure("bigram (left neighbour)", round(bigram, 4),
                         note=f"model {model - bigram:+.4f}"),
       results_io.figure("fill-mask top-1 of the 3 demo sentences", top1),
       results_io.figure("wall time, training command + report", round(total_s), "s",
                         f"{int(total_s // 60)} min {round(total_s % 60)} s, data "
                         f"{'prepared in a fresh' if fresh else 'from an existing'} data "
                         f"dir; training {round(trained_s)} s")],
      anchor="two count baselines on the same masked positions (bert_jax/apps/demo_report.py)",
      headline=f"held-out MLM accuracy {model:.4f}; {model / frequent:.2f}x most-frequent-token, "
               f"bigram {bigram:.4f}",
      case="accuracy", goal_=results_io.goal(
          "configs/bert_tiny.py:demo in the demo's budget", ">= 2x most frequent; above bigram",
          model >= 2 * frequent and model > bigram), load_before=load_before,
      notes="The fresh-clone wall time (venv and install included) is the demo row's.")
  print(quality["headline"])
  if not args.no_write:
    print(results_io.write(quality))


if __name__ == "__main__":
  main()
