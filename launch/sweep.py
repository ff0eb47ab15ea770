#!/usr/bin/env python3
"""Expands a config file's `get_sweep(hyper)` into runs with distinct workdirs.

  python launch/sweep.py --config configs/bert_base.py --workdir_root runs/lr_sweep --dry_run
  python launch/sweep.py --config configs/bert_base.py --workdir_root runs/lr_sweep   # runs them in turn
  python launch/sweep.py ... --launcher tpu --tpu_name my-pod --zone us-central2-b
  python launch/sweep.py ... --launcher slurm
  python launch/sweep.py --config configs/bert_large.py:s512 --aot v5e-256 [--results F.md]

A sweep is a function of `hyper` in the config file (big_vision style):
  def get_sweep(hyper):
    return hyper.product([hyper.sweep("config.train.learning_rate", [1e-4, 2e-4]),
                          hyper.sweep("config.seed", [0, 1])])
`--config` may carry the config arg (`configs/bert_base.py:mlm_only`); extra
`--config.x=y` flags are passed to every run.

`--aot TOPOLOGY` runs nothing: it compiles every point's train step for the TPU
topology (bert_jax/aot, libtpu, no TPU) and prints a markdown table of what fits, per
chip, and the largest global batch that fits per (mesh, remat) strategy.

Beside this file: sweep_points.py (the points: loaded, checked, selected) and sweep_aot.py
(the --aot compile and its table); run as a script, the directory of this file is on
sys.path, so they import by name.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

import sweep_aot as aot
import sweep_points as points


def commands(config: str, workdir_root: str, extra: list[str], python: str = "python",
             where: tuple[str, ...] = ()):
  """[(workdir, argv)] for every point of the sweep (those `where` selects; a point's
  workdir keeps its index in the whole sweep, so a selection reruns the same workdirs)."""
  sweep = points.load_sweep(config, extra)
  chosen = points.select(sweep, list(where))
  out = []
  for i, overrides in enumerate(sweep):
    if overrides not in chosen:
      continue
    workdir = os.path.join(workdir_root, f"{i:03d}_{points.run_name(overrides)}")
    argv = [python, "-m", "bert_jax.main", f"--config={config}", f"--workdir={workdir}"]
    argv += [f"--{k}={v}" for k, v in overrides.items()] + list(extra)
    out.append((workdir, argv))
  return out


REMOTE_DIR = "~/bert_jax"  # tpu_pod.sh's default


def wrap(argv: list[str], args) -> list[str]:
  """The command that starts one run on the chosen launcher. `argv` is
  [python, "-m", "bert_jax.main", flags...]; the remote and SLURM sides supply their own
  interpreter (the checkout's .venv that tpu_pod.sh --setup and the README create)."""
  here = os.path.dirname(os.path.abspath(__file__))
  # Both scripts run `.venv/bin/python -m bert_jax.main "$@"` (the local interpreter's
  # path means nothing on the TPU VMs): pass only the flags.
  if args.launcher == "tpu":
    env = ["env", f"REMOTE_DIR={args.remote_dir}"] if args.remote_dir != REMOTE_DIR else []
    return env + [os.path.join(here, "tpu_pod.sh"), args.tpu_name, args.zone] + argv[3:]
  if args.launcher == "slurm":
    return ["sbatch", os.path.join(here, "slurm.sbatch")] + argv[3:]
  return argv


def run_to_end(cmd: list[str]) -> tuple[int, bool]:
  """(exit status, whether Ctrl-C was pressed) of `cmd`, waited for to its end.

  Ctrl-C reaches the run too (one process group) and a training run then saves its step
  and exits; subprocess.call would kill it 0.25 s after the Ctrl-C, losing the steps
  since its last checkpoint. A second Ctrl-C is the run's own business (it stops at once)."""
  proc = subprocess.Popen(cmd)
  interrupted = False
  while True:
    try:
      return proc.wait(), interrupted
    except KeyboardInterrupt:
      interrupted = True


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--config", required=True)
  p.add_argument("--workdir_root", default="")
  p.add_argument("--aot", default="", metavar="TOPOLOGY",
                 help="compile every point for this TPU topology (e.g. v5e-256), run nothing")
  p.add_argument("--results", default="", help="with --aot: also append the table to this file")
  p.add_argument("--where", action="append", default=[], metavar="KEY=V1|V2",
                 help="only the points whose KEY is one of the values (as the --aot table "
                 "writes them, e.g. config.mesh_shape=-1x8x4)")
  p.add_argument("--jsonl", default="", help="with --aot: append each point's row to this "
                 "file as it compiles")
  p.add_argument("--launcher", choices=["local", "tpu", "slurm"], default="local")
  p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
  p.add_argument("--tpu_name", default="")
  p.add_argument("--zone", default="")
  p.add_argument("--remote_dir", default=REMOTE_DIR, help="with --launcher tpu: the "
                 "checkout on the TPU VMs (launch/tpu_pod.sh's REMOTE_DIR)")
  args, extra = p.parse_known_args(argv)
  bad = [e for e in extra if not e.startswith("--config.")]
  if bad:
    p.error(f"unknown arguments {bad} (only --config.x=y overrides are passed through)")
  if args.aot:
    # Settled as an entry point (JAX_PLATFORMS=cpu, libtpu's one-host settings where no
    # TPU is), but only for --aot, which compiles here: the runs of the other modes
    # inherit this environment (a login node's JAX_PLATFORMS=cpu would follow sbatch).
    from bert_jax import hardware  # pylint: disable=g-import-not-at-top
    hardware.configure()
    try:
      table = aot.aot_table(aot.aot_rows(args.config, args.aot, extra, args.jsonl,
                                          args.where), args.aot)
    except (FileNotFoundError, ValueError) as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    print(table)
    if args.results:
      with open(args.results, "a", encoding="utf-8") as f:
        f.write("\n" + table + "\n")
    return 0
  if args.results or args.jsonl:
    p.error("--results and --jsonl go with --aot (runs write their own workdirs)")
  if not args.workdir_root:
    p.error("--workdir_root is required (except with --aot)")
  if args.launcher == "tpu" and not (args.tpu_name and args.zone):
    p.error("--launcher tpu needs --tpu_name and --zone")
  try:
    runs = commands(args.config, args.workdir_root, extra, sys.executable, tuple(args.where))
  except (FileNotFoundError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  for workdir, run_argv in runs:
    cmd = wrap(run_argv, args)
    print(" ".join(shlex.quote(c) for c in cmd), flush=True)
    if not args.dry_run:
      try:
        status, interrupted = run_to_end(cmd)
      except OSError as e:  # e.g. no sbatch on this machine: one line, not a traceback
        print(f"error: cannot start {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 2
      if interrupted:
        print(f"interrupted: run {workdir} exited with {status}; the same command resumes "
              "the sweep (finished runs have nothing left to train)", file=sys.stderr)
        return status or 130
      if status:
        print(f"run {workdir} exited with {status}", file=sys.stderr)
        return status
  return 0


if __name__ == "__main__":
  try:
    sys.exit(main())
  except BrokenPipeError:  # `--dry_run | head`: the reader left, as cat would, no traceback
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (python's docs' recipe)
    sys.exit(1)
