#!/usr/bin/env python3
"""Expands a config file's `get_sweep(hyper)` into runs with distinct workdirs.

  python launch/sweep.py --config configs/bert_base.py --workdir_root runs/lr_sweep --dry_run
  python launch/sweep.py --config configs/bert_tiny.py --workdir_root runs/tiny   # local, in turn
  python launch/sweep.py ... --launcher tpu --tpu_name my-pod --zone us-central2-b
  python launch/sweep.py ... --launcher slurm

A sweep is a function of `hyper` in the config file (big_vision style):
  def get_sweep(hyper):
    return hyper.product([hyper.sweep("config.train.learning_rate", [1e-4, 2e-4]),
                          hyper.sweep("config.seed", [0, 1])])
`--config` may carry the config arg (`configs/bert_base.py:mlm_only`); extra
`--config.x=y` flags are passed to every run.
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import re
import shlex
import subprocess
import sys


class hyper:  # pylint: disable=invalid-name
  """The sweep vocabulary: a sweep is a list of override dicts."""

  @staticmethod
  def sweep(name: str, values) -> list[dict]:
    if not name.startswith("config."):
      raise ValueError(f"sweep keys are flag names like 'config.train.learning_rate', got {name!r}")
    return [{name: v} for v in values]

  @staticmethod
  def product(sweeps: list[list[dict]]) -> list[dict]:
    return [dict(kv for d in combo for kv in d.items()) for combo in itertools.product(*sweeps)]

  @staticmethod
  def zipit(sweeps: list[list[dict]]) -> list[dict]:
    if len({len(s) for s in sweeps}) > 1:
      raise ValueError("zipit needs sweeps of equal length")
    return [dict(kv for d in combo for kv in d.items()) for combo in zip(*sweeps)]


def load_sweep(config_path: str) -> list[dict]:
  path = config_path.split(":", 1)[0]
  if not os.path.exists(path):
    raise FileNotFoundError(f"config file {path} does not exist")
  spec = importlib.util.spec_from_file_location("sweep_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not hasattr(module, "get_sweep"):
    raise ValueError(f"{path} defines no get_sweep(hyper)")
  return module.get_sweep(hyper)


def run_name(overrides: dict) -> str:
  parts = [f"{k.split('.')[-1]}={v}" for k, v in overrides.items()]
  return re.sub(r"[^A-Za-z0-9_.=,-]", "_", ",".join(parts)) or "run"


def commands(config: str, workdir_root: str, extra: list[str], python: str = "python"):
  """[(workdir, argv)] for every point of the sweep."""
  out = []
  for i, overrides in enumerate(load_sweep(config)):
    workdir = os.path.join(workdir_root, f"{i:03d}_{run_name(overrides)}")
    argv = [python, "-m", "bert_jax.main", f"--config={config}", f"--workdir={workdir}"]
    argv += [f"--{k}={v}" for k, v in overrides.items()] + list(extra)
    out.append((workdir, argv))
  return out


def wrap(argv: list[str], args) -> list[str]:
  """The command that starts one run on the chosen launcher."""
  cmd = " ".join(shlex.quote(a) for a in argv)
  if args.launcher == "tpu":
    return ["gcloud", "compute", "tpus", "tpu-vm", "ssh", args.tpu_name, f"--zone={args.zone}",
            "--worker=all", f"--command=cd {args.remote_dir} && {cmd}"]
  if args.launcher == "slurm":
    here = os.path.dirname(os.path.abspath(__file__))
    return ["sbatch", os.path.join(here, "slurm.sbatch")] + argv[1:]
  return argv


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--config", required=True)
  p.add_argument("--workdir_root", required=True)
  p.add_argument("--launcher", choices=["local", "tpu", "slurm"], default="local")
  p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
  p.add_argument("--tpu_name", default="")
  p.add_argument("--zone", default="")
  p.add_argument("--remote_dir", default="~/bert_jax")
  args, extra = p.parse_known_args(argv)
  bad = [e for e in extra if not e.startswith("--config.")]
  if bad:
    p.error(f"unknown arguments {bad} (only --config.x=y overrides are passed through)")
  if args.launcher == "tpu" and not (args.tpu_name and args.zone):
    p.error("--launcher tpu needs --tpu_name and --zone")
  try:
    runs = commands(args.config, args.workdir_root, extra, sys.executable)
  except (FileNotFoundError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  for workdir, run_argv in runs:
    cmd = wrap(run_argv, args)
    print(" ".join(shlex.quote(c) for c in cmd), flush=True)
    if not args.dry_run:
      status = subprocess.call(cmd)
      if status:
        print(f"run {workdir} exited with {status}", file=sys.stderr)
        return status
  return 0


if __name__ == "__main__":
  sys.exit(main())
