"""Random SIGKILLs against real runs: does every rerun finish with the uninterrupted losses?

  python scripts/fault_campaign.py --task pretraining --runs 30 --seed 0 --root /tmp/faults
  python scripts/fault_campaign.py --task all --runs 30       # pretraining, finetune, word2vec

For each task: one uninterrupted reference run, a second one with the compilation cache
warm (its wall time is T; its losses must equal the reference's), then `--runs` campaigns.
A campaign starts the same command in a fresh workdir, SIGKILLs it at a moment drawn
uniformly from (0, T) (so some kills land inside an async save, or before any
checkpoint), then reruns the command until it exits 0 (each rerun is a plain resume).
It compares every logged step's loss with the reference and checks what is left in
checkpoints/: every step restorable (metadata readable), no `*.orbax-checkpoint-tmp*`.
Prints one markdown row per campaign and a summary line; exit status 1 if any campaign
did not resume exactly (max |loss difference| > --tolerance) or left an unreadable step.

Tasks (TASKS below: small configs, async saves on, checkpoints often, a loss every step;
the overrides are printed with the table):
  pretraining  configs/bert_tiny.py, 200 steps of batch 8 x 64 tokens, checkpoint every 25
  finetune     configs/finetune_classification.py:polarity (MiniLM), 80 sentences of 32
               tokens, batch 8, 2 epochs (20 steps), checkpoint every 5 steps
  word2vec     configs/word2vec.py on the embedded corpus, an Orbax checkpoint each epoch
               and every 5 steps inside one (resumed after that very batch)
The child processes share a persistent XLA compilation cache (<root>/xla_cache, or the
JAX_COMPILATION_CACHE_DIR already set), so a rerun does not compile again; a kill can land
while an entry is being written, which the reruns then meet.

tests/procs.py runs main for the end-to-end tests with run_main, and tests/train/test_loop.py
(test_three_random_sigkills_...) checks its kills with train_losses, duplicate_steps and
checkpoints_ok.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # this process only reads checkpoints
sys.path.insert(0, os.path.join(ROOT, "bench"))
import results_io  # noqa: E402  pylint: disable=wrong-import-position

TASKS = {
    "pretraining": ["--config=configs/bert_tiny.py", "--config.train.num_steps=200",
                    "--config.train.batch_size=8", "--config.data.max_seq_length=64",
                    "--config.train.checkpoint_every=25", "--config.train.log_every=1",
                    "--config.train.eval_every=100", "--config.train.eval_steps=5",
                    "--config.train.keep_checkpoints=3",
                    "--config.train.async_checkpoints=True"],
    "finetune": ["--config=configs/finetune_classification.py:polarity",
                 "--config.data.max_train_examples=80", "--config.data.max_seq_length=32",
                 "--config.train.batch_size=8", "--config.train.num_epochs=2",
                 "--config.train.checkpoint_every=5", "--config.train.keep_checkpoints=3",
                 "--config.train.log_every=1", "--config.train.async_checkpoints=True"],
    "word2vec": ["--config=configs/word2vec.py", "--config.train.log_every_steps=1",
                 "--config.train.checkpoint_every_steps=5",
                 "--config.train.async_checkpoints=True"],
}
# The loop's progress line, `step 3/6 | loss ...`: the first one marks the end of start-up.
STEP_LINE = re.compile(r"^step \d+/\d+")
# Train losses in metrics.jsonl: `loss` (BERT's loop, word2vec's running mean) and
# word2vec's `epoch_loss`, also under the `train/` prefix of the renamed metrics.
LOSS_KEYS = ("loss", "epoch_loss")


def xla_flags(devices: int) -> str:
  """XLA_FLAGS of a child with `devices` fake CPU devices and this process's other XLA
  flags (tests/conftest.py: LLVM -O0, which compiles the tiny programs faster)."""
  others = [f for f in os.environ.get("XLA_FLAGS", "").split()
            if not f.startswith("--xla_force_host_platform_device_count")]
  return " ".join([f"--xla_force_host_platform_device_count={devices}"] + others)


def child_env(root: str | None = None, **extra: str) -> dict:
  """os.environ for a child main: this checkout first on PYTHONPATH, CPU unless set, and a
  persistent compilation cache (the one already set, else <root>/xla_cache) used for
  every compile, however short."""
  env = dict(os.environ, PYTHONPATH=ROOT, **extra)
  env.setdefault("JAX_PLATFORMS", "cpu")
  if root is not None:
    env.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(root, "xla_cache"))
  env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  env.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
  return env


@dataclasses.dataclass
class Run:
  returncode: int
  seconds: float
  output: str
  signalled: bool        # the signal was sent (the process may have finished anyway)
  first_step_s: float | None  # when the first progress line came, from the start
  signal_s: float | None = None  # when the signals left, from the start (multihost.launch)


def run_main(flags: list[str], *, env: dict | None = None, log: str | None = None,
             kill_after: float | None = None, after_first_step: bool = False,
             signal_at: str | None = None, sig: int = signal.SIGKILL,
             timeout: float = 1800) -> Run:
  """Runs `python -m bert_jax.main FLAGS` and, optionally, signals it.

  kill_after: send `sig` this many seconds after the start, or with after_first_step
    after the first `step k/N` line (the kill then lands in training, not start-up).
  signal_at: send `sig` as soon as a line starting with this text is printed.
  The output is kept (and appended to `log`); the call returns when the process ended.
  """
  t0 = time.monotonic()
  proc = subprocess.Popen([sys.executable, "-u", "-m", "bert_jax.main"] + flags, cwd=ROOT,
                          env=env if env is not None else child_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace")
  lines, first_step, sent = [], threading.Event(), threading.Event()
  first_step_at = []

  def read():  # in a thread, so a signal lands at once however fast the lines come
    with open(log, "a", encoding="utf-8") if log else open(os.devnull, "w") as out:
      for line in proc.stdout:
        lines.append(line)
        out.write(line)
        if not first_step.is_set() and STEP_LINE.match(line):
          first_step_at.append(time.monotonic())
          first_step.set()
        if signal_at is not None and not sent.is_set() and line.startswith(signal_at):
          proc.send_signal(sig)
          sent.set()
      first_step.set()  # ended without a step line: nothing more to wait for

  reader = threading.Thread(target=read, daemon=True)
  reader.start()
  if kill_after is not None:
    start = t0
    if after_first_step:
      first_step.wait(timeout)
      start = first_step_at[0] if first_step_at else time.monotonic()
    try:
      proc.wait(timeout=max(0.0, start + kill_after - time.monotonic()))
    except subprocess.TimeoutExpired:
      proc.send_signal(sig)
      sent.set()
  try:
    proc.wait(timeout=timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()
  reader.join()
  return Run(proc.returncode, time.monotonic() - t0, "".join(lines), sent.is_set(),
             first_step_at[0] - t0 if first_step_at else None)


def train_losses(workdir: str) -> dict[tuple[str, int], float]:
  """(name, step) -> train loss from workdir/metrics.jsonl, for the names in LOSS_KEYS with
  or without the `train/` prefix; the last record of a step wins (a line cut by a kill
  is skipped)."""
  out = {}
  path = os.path.join(workdir, "metrics.jsonl")
  if os.path.exists(path):
    for line in open(path, encoding="utf-8"):
      try:
        r = json.loads(line)
      except ValueError:
        continue
      for name, value in r.items():
        key = name[len("train/"):] if name.startswith("train/") else name
        if key in LOSS_KEYS and isinstance(value, (int, float)):
          out[(key, int(r["step"]))] = float(value)
  return out


def duplicate_steps(workdir: str) -> int:
  """Train-loss records logged more than once for the same (name, step)."""
  seen, dup = set(), 0
  for line in open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8"):
    try:
      r = json.loads(line)
    except ValueError:
      continue
    for name in r:
      key = name[len("train/"):] if name.startswith("train/") else name
      if key in LOSS_KEYS:
        dup += (key, r["step"]) in seen
        seen.add((key, r["step"]))
  return dup


def checkpoints_ok(workdir: str) -> tuple[list[int], list[str]]:
  """(steps, problems) of workdir/checkpoints: every step is restored in full (each array
  of its state read into numpy, its meta JSON); a step that fails and any half-written
  `*.orbax-checkpoint-tmp*` left over are problems."""
  sys.path.insert(0, ROOT)
  import jax  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
  directory = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(directory):
    return [], []
  problems = [n for n in os.listdir(directory) if "orbax-checkpoint-tmp" in n]
  ck = checkpoint.Checkpointer(directory, async_save=False)
  steps = ck.all_steps()
  for s in steps:
    try:
      one_device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
      abstract = jax.tree_util.tree_map(
          lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one_device),
          ck.state_metadata(s))
      ck.manager.restore(s, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    except Exception as e:  # noqa: BLE001 - reported in the table
      problems.append(f"{s}: {type(e).__name__}")
  ck.close()
  return steps, problems


HEADER = ("| task | run | killed at | last logged step | checkpoints at kill | resumed from | "
          "reruns | moved aside | cache read errors | max loss diff | duplicate steps | "
          "checkpoints left | exact |")
# A rerun's lines that say what it met: where it resumed, a checkpoint moved aside, a
# compilation-cache entry jax could not read (a kill while it was written).
RESUMED = re.compile(r"resumed from .* at step (\d+)|resumed at epoch \d+, step (\d+)")
MOVED_ASIDE = "moved the unreadable checkpoint"
CACHE_ERROR = "Error reading persistent compilation cache entry"


def campaign(task: str, runs: int, seed: int, root: str, tolerance: float,
             max_reruns: int = 5) -> list[dict]:
  """One reference run, one more uninterrupted run (timed with a warm compilation cache:
  the kill window, and a check that two fresh processes agree), then `runs` campaigns."""
  flags = TASKS[task]
  base = os.path.join(root, task)
  shutil.rmtree(base, ignore_errors=True)
  os.makedirs(base)
  env = child_env(root)
  ref_dir, again_dir = os.path.join(base, "reference"), os.path.join(base, "again")
  for workdir in (ref_dir, again_dir):
    done = run_main(flags + [f"--workdir={workdir}"], env=env, log=workdir + ".log")
    if done.returncode:
      raise SystemExit(f"{task}: the uninterrupted run failed (exit {done.returncode}); "
                       f"see {workdir}.log")
  ref, again = train_losses(ref_dir), train_losses(again_dir)
  apart = max((abs(again[key] - ref[key]) for key in ref if key in again), default=0.0)
  if set(again) != set(ref) or apart > tolerance:
    raise SystemExit(f"{task}: two uninterrupted runs logged different losses (max "
                     f"difference {apart:.2e}, steps {len(ref)} vs {len(again)})")
  window = done.seconds  # the warm run's wall time T: kills uniform over (0, T)
  print(f"{task}: {sys.executable} -m bert_jax.main {' '.join(flags)}; uninterrupted run "
        f"{window:.1f} s with a warm compilation cache, {len(ref)} losses", flush=True)
  rng = random.Random(seed)
  rows = []
  for k in range(runs):
    workdir = os.path.join(base, f"run{k}")
    log = os.path.join(base, f"run{k}.log")
    moment = rng.uniform(0.0, window)
    cmd = flags + [f"--workdir={workdir}"]
    run_main(cmd, env=env, log=log, kill_after=moment)
    logged_at_kill = max((s for _, s in train_losses(workdir)), default=0)
    steps_at_kill = _steps(workdir)
    reruns, code, texts = 0, None, []
    while code != 0 and reruns < max_reruns:
      rerun = run_main(cmd, env=env, log=log)
      code, reruns = rerun.returncode, reruns + 1
      texts.append(rerun.output)
    resumed = RESUMED.search(texts[0])
    got = train_losses(workdir)
    diffs = [abs(got[key] - ref[key]) for key in ref if key in got]
    missing = [key for key in ref if key not in got]
    steps, problems = checkpoints_ok(workdir)
    row = {"run": k, "kill_s": round(moment, 1), "logged_at_kill": logged_at_kill,
           "checkpoints_at_kill": steps_at_kill,
           "resumed_from": (resumed.group(1) or resumed.group(2)) if resumed else "start",
           "reruns": reruns, "finished": code == 0,
           "moved_aside": sum(t.count(MOVED_ASIDE) for t in texts),
           "cache_errors": sum(t.count(CACHE_ERROR) for t in texts),
           "max_loss_diff": max(diffs) if diffs else float("nan"), "missing_steps": len(missing),
           "duplicate_steps": duplicate_steps(workdir), "checkpoints_left": steps,
           "problems": problems}
    row["exact"] = (row["finished"] and not missing and not problems
                    and row["max_loss_diff"] <= tolerance and row["duplicate_steps"] == 0)
    rows.append(row)
    print(f"| {task} | {k} | {row['kill_s']} s | {logged_at_kill} | {steps_at_kill} | "
          f"{row['resumed_from']} | {reruns} | {row['moved_aside']} | {row['cache_errors']} | "
          f"{row['max_loss_diff']:.2e} | {row['duplicate_steps']} | {steps}"
          f"{' ' + str(problems) if problems else ''}{'' if code == 0 else ' (exit ' + str(code) + ')'}"
          f" | {'yes' if row['exact'] else 'NO'} |", flush=True)
    if row["exact"]:
      shutil.rmtree(workdir, ignore_errors=True)  # keep the disk small; the log stays
  exact = sum(r["exact"] for r in rows)
  print(f"{task}: {exact}/{len(rows)} campaigns resumed exactly (kill window {window:.0f} s, "
        f"tolerance {tolerance:g})", flush=True)
  return rows


def _steps(workdir: str) -> list[int]:
  """The finished checkpoint steps in workdir/checkpoints (names only, nothing read)."""
  directory = os.path.join(workdir, "checkpoints")
  return sorted(int(n) for n in os.listdir(directory) if n.isdigit()) if os.path.isdir(
      directory) else []


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--task", choices=sorted(TASKS) + ["all"], default="pretraining")
  p.add_argument("--runs", type=int, default=30)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--root", default="/tmp/fault_campaign")
  p.add_argument("--tolerance", type=float, default=1e-6)
  p.add_argument("--result", action="store_true",
                 help="write bench/results/fault_campaign.json (with --task all), what "
                      "bench/RESULTS.md renders")
  p.add_argument("--results-dir", default=results_io.RESULTS_DIR)
  args = p.parse_args()
  if args.result and args.task != "all":
    p.error("--result needs --task all (the result covers every task)")
  load_before = results_io.load()
  print(HEADER)
  print("|" + " --- |" * HEADER.count(" |"))
  ok, by_task = True, {}
  for task in sorted(TASKS) if args.task == "all" else [args.task]:
    rows = campaign(task, args.runs, args.seed, args.root, args.tolerance)
    by_task[task] = rows
    ok &= all(r["exact"] for r in rows)
  if args.result:
    res = campaign_result(by_task, args, load_before)
    print(res["headline"], "\nwrote", results_io.write(res, args.results_dir))
  sys.exit(0 if ok else 1)


def campaign_result(by_task: dict, args, load_before: float) -> dict:
  """Every task's campaigns as one bench result: how many resumed exactly."""
  exact = {t: sum(r["exact"] for r in rows) for t, rows in by_task.items()}
  total, runs = sum(exact.values()), sum(len(rows) for rows in by_task.values())
  worst = max((r["max_loss_diff"] for rows in by_task.values() for r in rows
               if r["max_loss_diff"] == r["max_loss_diff"]), default=float("nan"))
  figures = [results_io.figure(f"{t}: random SIGKILLs resumed exactly",
                               f"{exact[t]} / {len(rows)}",
                               note=f"{sum(r['moved_aside'] for r in rows)} checkpoints moved "
                                    "aside as unreadable")
             for t, rows in by_task.items()]
  figures.append(results_io.figure("largest |loss difference| after a resume", worst))
  return results_io.result(
      "fault_campaign", "Fault campaign", figures,
      anchor=f"the uninterrupted run's losses ({args.tolerance:g}), every checkpoint restorable",
      headline=f"{total} / {runs} resumed exactly",
      goal_=results_io.goal(f"{args.runs} random SIGKILLs per task, rerun to the end",
                            "every resume exact", total == runs and runs > 0),
      load_before=load_before, notes=f"seed {args.seed}; tasks " + ", ".join(by_task))


if __name__ == "__main__":
  main()
