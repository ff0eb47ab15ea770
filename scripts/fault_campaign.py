"""Random SIGKILLs against real runs: does every rerun finish with the uninterrupted losses?

  python scripts/fault_campaign.py --task pretraining --runs 30 --seed 0 --root /tmp/faults
  python scripts/fault_campaign.py --task all --runs 30       # pretraining, finetune, word2vec

For each task: one uninterrupted reference run (its wall time T), then `--runs` campaigns.
A campaign starts the same command in a fresh workdir, SIGKILLs it at a moment drawn
uniformly from (0, T) (so some kills land inside an async save, or before any
checkpoint), then reruns the command until it exits 0 (each rerun is a plain resume).
It compares every logged step's loss with the reference and checks what is left in
checkpoints/: every step restorable (metadata readable), no `*.orbax-checkpoint-tmp*`.
Prints one markdown row per campaign and a summary line; exit status 1 if any campaign
did not resume exactly (max |loss difference| > --tolerance) or left an unreadable step.

Tasks (small configs, async saves on, checkpoints often):
  pretraining  configs/bert_tiny.py, 200 steps, checkpoint every 25, log every step
  finetune     configs/finetune_classification.py:polarity (MiniLM), checkpoints each epoch
  word2vec     configs/word2vec.py, an Orbax checkpoint each epoch
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # this process only reads checkpoints

TASKS = {
    "pretraining": ["--config=configs/bert_tiny.py", "--config.train.num_steps=200",
                    "--config.train.checkpoint_every=25", "--config.train.log_every=1",
                    "--config.train.eval_every=100", "--config.train.keep_checkpoints=3",
                    "--config.train.async_checkpoints=True"],
    "finetune": ["--config=configs/finetune_classification.py:polarity",
                 "--config.train.log_every=1", "--config.train.async_checkpoints=True"],
    "word2vec": ["--config=configs/word2vec.py"],
}


def _run(flags: list[str], workdir: str, kill_after: float | None, log) -> tuple[int, float]:
  """Runs main; SIGKILLs it after `kill_after` s (None: to the end). (returncode, seconds)."""
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
  t0 = time.monotonic()
  with open(log, "a") as out:
    proc = subprocess.Popen([sys.executable, "-m", "bert_jax.main", f"--workdir={workdir}"]
                            + flags, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
      proc.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
      proc.send_signal(signal.SIGKILL)
      proc.wait()
  return proc.returncode, time.monotonic() - t0


def _losses(workdir: str) -> dict[int, float]:
  """step -> the last logged train loss of that step (a resumed run logs each step once)."""
  out = {}
  path = os.path.join(workdir, "metrics.jsonl")
  if os.path.exists(path):
    for line in open(path, encoding="utf-8"):
      try:
        r = json.loads(line)
      except ValueError:
        continue
      for key in ("loss", "epoch_loss"):
        if isinstance(r.get(key), (int, float)):
          out[(key, int(r["step"]))] = float(r[key])
  return out


def _duplicates(workdir: str) -> int:
  """Train records logged more than once for the same step."""
  seen, dup = set(), 0
  for line in open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8"):
    r = json.loads(line)
    if "loss" in r:
      dup += r["step"] in seen
      seen.add(r["step"])
  return dup


def _checkpoints_ok(workdir: str) -> tuple[list[int], list[str]]:
  """(restorable steps, problems) of workdir/checkpoints."""
  sys.path.insert(0, ROOT)
  from bert_jax import checkpoint  # pylint: disable=g-import-not-at-top
  directory = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(directory):
    return [], []
  problems = [n for n in os.listdir(directory) if "orbax-checkpoint-tmp" in n]
  ck = checkpoint.Checkpointer(directory, async_save=False)
  steps = ck.all_steps()
  for s in steps:
    try:
      ck.state_metadata(s)
    except Exception as e:  # noqa: BLE001 - reported in the table
      problems.append(f"{s}: {type(e).__name__}")
  ck.close()
  return steps, problems


def campaign(task: str, runs: int, seed: int, root: str, tolerance: float,
             max_reruns: int = 5) -> list[dict]:
  flags = TASKS[task]
  base = os.path.join(root, task)
  shutil.rmtree(base, ignore_errors=True)
  os.makedirs(base)
  ref_dir = os.path.join(base, "reference")
  code, ref_seconds = _run(flags, ref_dir, None, os.path.join(base, "reference.log"))
  if code:
    raise SystemExit(f"{task}: the reference run failed (exit {code}); see {base}/reference.log")
  ref = _losses(ref_dir)
  rng = random.Random(seed)
  rows = []
  for k in range(runs):
    workdir = os.path.join(base, f"run{k}")
    log = os.path.join(base, f"run{k}.log")
    moment = rng.uniform(0.0, ref_seconds)
    _run(flags, workdir, moment, log)
    logged_at_kill = max((s for _, s in _losses(workdir)), default=0)
    steps_at_kill, _ = _checkpoints_ok(workdir)
    reruns, code = 0, None
    while code != 0 and reruns < max_reruns:
      start = os.path.getsize(log)
      code, _ = _run(flags, workdir, None, log)
      reruns += 1
      text = open(log, encoding="utf-8", errors="replace").read()[start:]
      resumed = re.search(r"resumed from .* at step (\d+)|resumed at epoch (\d+)", text)
    got = _losses(workdir)
    diffs = [abs(got[key] - ref[key]) for key in ref if key in got]
    missing = [key for key in ref if key not in got]
    steps, problems = _checkpoints_ok(workdir)
    row = {"run": k, "kill_s": round(moment, 1), "logged_at_kill": logged_at_kill,
           "checkpoints_at_kill": steps_at_kill,
           "resumed_from": (resumed.group(1) or resumed.group(2)) if code == 0 and resumed
           else "start", "reruns": reruns, "finished": code == 0,
           "max_loss_diff": max(diffs) if diffs else float("nan"), "missing_steps": len(missing),
           "duplicate_steps": _duplicates(workdir), "checkpoints_left": steps,
           "problems": problems}
    row["exact"] = (row["finished"] and not missing and not problems
                    and row["max_loss_diff"] <= tolerance and row["duplicate_steps"] == 0)
    rows.append(row)
    print(f"| {task} | {k} | {row['kill_s']} s | {logged_at_kill} | {steps_at_kill} | "
          f"{row['resumed_from']} | {reruns} | {row['max_loss_diff']:.2e} | "
          f"{row['duplicate_steps']} | {steps} | {'yes' if row['exact'] else 'NO'} |",
          flush=True)
    shutil.rmtree(workdir, ignore_errors=True)  # keep the disk small; the log stays
  exact = sum(r["exact"] for r in rows)
  print(f"{task}: {exact}/{len(rows)} campaigns resumed exactly (reference {ref_seconds:.0f} s, "
        f"tolerance {tolerance:g})", flush=True)
  return rows


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--task", choices=sorted(TASKS) + ["all"], default="pretraining")
  p.add_argument("--runs", type=int, default=30)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--root", default="/tmp/fault_campaign")
  p.add_argument("--tolerance", type=float, default=1e-6)
  args = p.parse_args()
  print("| task | run | killed at | last logged step | checkpoints at kill | resumed from | "
        "reruns | max loss diff | duplicate steps | checkpoints left | exact |")
  print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
  ok = True
  for task in sorted(TASKS) if args.task == "all" else [args.task]:
    rows = campaign(task, args.runs, args.seed, args.root, args.tolerance)
    ok &= all(r["exact"] for r in rows)
  sys.exit(0 if ok else 1)


if __name__ == "__main__":
  main()
