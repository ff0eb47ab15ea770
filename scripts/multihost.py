"""Multi-process equivalence: the same run on 1 x 8, 2 x 4 and 4 x 2 local CPU processes.

The contract (ARCHITECTURE.md "Hosts load rows by batch block"): any mesh on any number of
processes trains exactly what one process with all the devices trains. This runs
`python -m bert_jax.main` as N processes on 127.0.0.1 (jax.distributed, 8/N fake CPU
devices each) for every mesh x process count and compares each run's per-step losses and
eval metrics with the one-process run of the same mesh:

  .venv/bin/python scripts/multihost.py                        # the full matrix (RESULTS)
  .venv/bin/python scripts/multihost.py --tasks pretraining --meshes 1,1,8 --processes 1,2
  .venv/bin/python scripts/multihost.py --tasks word2vec --meshes "1,1,8;2,2,2" \
      --processes 1,2 --stop

--stop replaces each multi-process run by two stopped ones (a SIGTERM to the last process
only; to every process, 1 s apart), each rerun to the end: every process must stop after
the same step, save it and exit 0, and the rerun's losses equal the one-process run's.

tests/train/test_loop_multihost.py runs two of its meshes ((1, 1, 8), then (2, 1, 4)) on 2
processes against one process, through stops and restores.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import portpicker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from scripts import fault_campaign  # pylint: disable=wrong-import-position

sys.path.insert(0, os.path.join(ROOT, "bench"))
import results_io  # noqa: E402  pylint: disable=wrong-import-position

CORPUS = os.path.join(ROOT, "tests", "testdata", "data", "tiny_corpus.txt")
MESHES = ((8, 1, 1), (2, 2, 2), (2, 1, 4), (1, 2, 4), (1, 1, 8))
PROCESSES = (1, 2, 4)
DEVICES = 8

_TINY_MODEL = ["--config.model.hidden_size=32", "--config.model.num_heads=8",
               "--config.model.mlp_dim=64", "--config.model.dropout_rate=0.0",
               "--config.model.attention_dropout_rate=0.0"]


def task_flags(task: str, data_dir: str, num_steps: int = 6,
               steps_a_stop: bool = False) -> list[str]:
  """Flags of a tiny run of `task` on tests/testdata's corpus: 8 heads (so a tensor axis of 8
  splits them), dropout 0 (the per-step losses are then a function of the data alone),
  batch 16, every step logged, one eval at the end. steps_a_stop: word2vec in batches of
  32 pairs (~30 steps an epoch, not 1), so a stop at step 3 falls inside its first epoch."""
  common = [f"--config.train.num_steps={num_steps}", "--config.train.batch_size=16",
            "--config.train.log_every=1", f"--config.train.eval_every={num_steps}",
            f"--config.train.checkpoint_every={num_steps}", "--config.train.warmup_steps=2",
            "--config.train.async_checkpoints=False", f"--config.data.data_dir={data_dir}"]
  if task == "pretraining":  # NSP + MLM: both heads, the pooler, masked positions
    return ["--config=configs/bert_tiny.py", "--config.data.corpus=text",
            f"--config.data.text_files={CORPUS}", "--config.data.vocab_size=256",
            "--config.model.vocab_size=256", "--config.data.max_seq_length=16",
            "--config.model.max_len=16", "--config.data.max_predictions_per_seq=4",
            "--config.data.dupe_factor=10", "--config.data.validation_fraction=0.4",
            "--config.train.eval_steps=0", *_TINY_MODEL, *common]
  if task == "lm":  # GPT: causal attention, a trained BPE, token streams
    return ["--config=configs/gpt.py:tiny,text", f"--config.data.text_files={CORPUS}",
            "--config.data.vocab_size=512", "--config.model.vocab_size=512",
            "--config.data.max_seq_length=32", "--config.model.max_len=32",
            "--config.data.validation_fraction=0.4", "--config.model.num_layers=2",
            "--config.train.eval_steps=0", *_TINY_MODEL, *common]
  if task == "word2vec":  # its own trainer: every host builds the global batch
    return ["--config=configs/word2vec.py", "--config.data.corpus=text",
            f"--config.data.text_glob={CORPUS}", "--config.data.min_count=1",
            "--config.train.chunk_size=64", "--config.train.epochs=2",
            "--config.train.chunks_per_step=16", "--config.train.log_every_steps=1",
            "--config.model.embed_dim=16", "--config.train.async_checkpoints=False",
            "--config.export_format=none"] + (
                ["--config.train.chunk_size=8", "--config.train.chunks_per_step=4"]
                if steps_a_stop else [])
  raise ValueError(f"unknown task {task!r}: expected pretraining, lm or word2vec")


def launch(flags: list[str], processes: int, workdir: str, *, timeout: float = 900,
           env: dict | None = None, stop_at: int = 0,
           stop: tuple[tuple[int, float], ...] = ()) -> list[fault_campaign.Run]:
  """Runs `python -m bert_jax.main FLAGS --workdir WORKDIR` as `processes` processes of
  8/processes fake CPU devices each (one process: no jax.distributed); returns each one's
  Run once all ended (all are killed at `timeout`). stop: (process, delay s) pairs, each
  sent a SIGTERM `delay` seconds after process 0 logs step `stop_at` (the loop's `step
  k/N`, word2vec's `epoch e/E step k`); Run.signal_s says when, from the start."""
  per = DEVICES // processes
  base = dict(env or fault_campaign.child_env(),
              XLA_FLAGS=fault_campaign.xla_flags(per), JAX_PLATFORMS="cpu")
  cmd = [sys.executable, "-u", "-m", "bert_jax.main", *flags, f"--workdir={workdir}"]
  if processes > 1:
    port = portpicker.pick_unused_port()
    cmd += [f"--num_processes={processes}", f"--coordinator_address=127.0.0.1:{port}",
            "--heartbeat_timeout=30"]
  t0 = time.monotonic()
  procs = [subprocess.Popen(cmd + ([f"--process_id={i}"] if processes > 1 else []),
                            cwd=ROOT, env=base, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace")
           for i in range(processes)]
  outs, sent = [[] for _ in procs], []
  at = re.compile(rf"^(epoch \d+/\d+ )?step {stop_at}\b")

  def read(i):
    for line in procs[i].stdout:
      outs[i].append(line)
      if i == 0 and stop and at.match(line):
        sent.append(time.monotonic() - t0)
        for target, delay in stop:
          threading.Timer(delay, procs[target].send_signal, (signal.SIGTERM,)).start()

  readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(processes)]
  for r in readers:
    r.start()
  runs = []
  for i, p in enumerate(procs):
    try:
      p.wait(timeout=max(1.0, timeout - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
      for q in procs:
        q.kill()
      p.wait()
      outs[i].append(f"\n[multihost] killed after {timeout:.0f} s")
    readers[i].join()
    runs.append(fault_campaign.Run(p.returncode, time.monotonic() - t0, "".join(outs[i]),
                                   bool(sent), None, sent[0] if sent else None))
  return runs


def metrics(workdir: str) -> tuple[dict[int, float], dict[int, dict[str, float]]]:
  """({step: train/loss}, {step: {eval/...: value}}) from metrics.jsonl; a resumed run's
  row for a step replaces the earlier one."""
  losses, evals = {}, {}
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    for row in map(json.loads, f):
      if "train/loss" in row:
        losses[row["step"]] = row["train/loss"]
      scores = {k: v for k, v in row.items()
                if k.startswith("eval/") and isinstance(v, (int, float))}
      if scores:
        evals[row["step"]] = scores
  return losses, evals


def compare(ref: str, other: str) -> tuple[float, float, int]:
  """(max relative difference of the per-step losses, of every evaluation's metrics, steps
  compared) between two workdirs; ValueError if their steps or evaluations differ."""
  (l1, e1), (l2, e2) = metrics(ref), metrics(other)
  if sorted(l1) != sorted(l2) or not l1:
    raise ValueError(f"steps differ: {sorted(l1)} vs {sorted(l2)}")
  keys = lambda evals: {(s, k) for s, scores in evals.items() for k in scores}
  if keys(e1) != keys(e2):
    raise ValueError(f"evaluations differ: {sorted(keys(e1))} vs {sorted(keys(e2))}")
  rel = lambda a, b: abs(a - b) / max(abs(a), 1e-12)
  return (max(rel(l1[s], l2[s]) for s in l1),
          max([rel(e1[s][k], e2[s][k]) for s, k in keys(e1)] or [0.0]), len(l1))


STOP_AT = 3  # --stop: the step process 0 logs when the SIGTERMs leave
SAVED = re.compile(r"stopped after step (\d+)|: saved step (\d+)")


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--tasks", default="pretraining,lm")
  p.add_argument("--meshes", default=";".join(",".join(map(str, m)) for m in MESHES),
                 help="';'-separated data,fsdp,tensor shapes")
  p.add_argument("--processes", default=",".join(map(str, PROCESSES)))
  p.add_argument("--steps", type=int, default=6)
  p.add_argument("--stop", action="store_true",
                 help=f"several processes: instead of one run, two stopped by SIGTERM when "
                      f"process 0 logs step {STOP_AT} (to the last process only; to every "
                      "process, 1 s apart), each rerun to the end on its workdir; the "
                      "losses are compared as above")
  p.add_argument("--out", default=None, help="a JSON file for the table's rows")
  p.add_argument("--result", action="store_true",
                 help="write bench/results/multihost_equivalence.json (multihost_stop.json "
                      "with --stop), what bench/RESULTS.md renders")
  p.add_argument("--results-dir", default=results_io.RESULTS_DIR)
  a = p.parse_args(argv)
  meshes = [tuple(int(x) for x in m.split(",")) for m in a.meshes.split(";")]
  counts = [int(x) for x in a.processes.split(",")]
  root = tempfile.mkdtemp(prefix="multihost_")
  env = fault_campaign.child_env(root)
  rows, failed = [], 0
  load_before = results_io.load()
  print(f"load before: {load_before:.2f}", flush=True)
  print("| task | mesh (data, fsdp, tensor) | processes x devices | row shards | hosts per "
        "block | max rel. loss diff | max rel. eval diff | steps | wall s |")
  print("|---|---|---|---|---|---|---|---|---|")
  for task in a.tasks.split(","):
    flags = task_flags(task, os.path.join(root, "data"), a.steps, steps_a_stop=a.stop)
    for mesh in meshes:
      mesh_flag = f"--config.mesh_shape=({','.join(map(str, mesh))})"
      ref = None
      for n in counts:
        cases = [("", ())]
        if a.stop and n > 1:
          cases = [("SIGTERM to the last process", ((n - 1, 0.0),)),
                   ("SIGTERM to all, 1 s apart", tuple((i, float(i)) for i in range(n)))]
        for k, (what, stop) in enumerate(cases):
          workdir = os.path.join(root, f"{task}_{'x'.join(map(str, mesh))}_{n}_{k}")
          runs = launch(flags + [mesh_flag], n, workdir, env=env, stop_at=STOP_AT, stop=stop)
          shards, seconds = _layout(runs[0].output), round(runs[0].seconds, 1)
          problem = ""
          if stop:  # every process stopped (exit 0) after the same saved step, then a rerun
            saved = {next(g for g in m.groups() if g) for r in runs
                     for m in [SAVED.search(r.output)] if m}
            if any(r.returncode for r in runs) or len(saved) != 1:
              problem = f"stopped with exits {[r.returncode for r in runs]}, steps {saved}"
            else:
              what += f" at step {STOP_AT}: all saved step {saved.pop()}"
              runs = launch(flags + [mesh_flag], n, workdir, env=env)
          if problem or any(r.returncode for r in runs):
            failed += 1
            tail = "\n".join(r.output[-1500:] for r in runs)
            print(f"| {task} | {mesh} | {n} x {DEVICES // n} | FAILED {what} {problem} | | | | | |"
                  f"\n{tail}")
            continue
          if ref is None:
            ref = workdir
          dl, de, steps = compare(ref, workdir)
          if max(dl, de) > 1e-5:
            failed += 1
          row = dict(task=task, mesh=mesh, processes=n, loss_rel=dl, eval_rel=de, steps=steps,
                     seconds=seconds, layout=shards, stop=what)
          rows.append(row)
          print(f"| {task} | {mesh} | {n} x {DEVICES // n}{', ' + what if what else ''} | "
                f"{shards} | {dl:.1e} | {de:.1e} | {steps} | {seconds} |", flush=True)
  print(f"load after: {os.getloadavg()[0]:.2f}")
  if a.out:
    with open(a.out, "w") as f:
      json.dump(rows, f, indent=1)
  if a.result:
    res = equivalence_result(rows, failed, a, load_before)
    print(res["headline"], "\nwrote", results_io.write(res, a.results_dir))
  return 1 if failed else 0


def equivalence_result(rows: list, failed: int, a, load_before: float) -> dict:
  """The run's table as a bench result: the largest differences over every cell."""
  tasks, cells = a.tasks.replace(",", ", "), len(rows) + failed
  loss = max((r["loss_rel"] for r in rows), default=float("nan"))
  evals = max((r["eval_rel"] for r in rows), default=float("nan"))
  met = not failed and bool(rows) and max(loss, evals) <= 1e-5
  figures = [results_io.figure("cells (task x mesh x processes" +
                               (" x stop case" if a.stop else "") + ")", cells),
             results_io.figure("cells failed or off", failed),
             results_io.figure("largest relative per-step loss difference", float(f"{loss:.2g}")),
             results_io.figure("largest relative eval difference", float(f"{evals:.2g}"))]
  counts, meshes = a.processes.split(","), a.meshes.split(";")
  what = (" vs ".join(f"{n} x {DEVICES // int(n)}" for n in counts) +
          f" processes, {len(meshes)} meshes; {tasks}")
  where = f"processes x devices {', '.join(counts)} x {DEVICES}/n; meshes (data,fsdp,tensor) " \
          f"{' '.join(meshes)}; tasks {tasks}"
  if a.stop:
    stopped = sum(1 for r in rows if r["stop"])
    figures.insert(1, results_io.figure("stopped runs: every process saved the same step, "
                                        "then resumed", f"{stopped} / {stopped + failed}"))
    return results_io.result(
        "multihost_stop", "Multi-host stop and restore agreement", figures,
        anchor="the uninterrupted one-process run's losses",
        headline=f"{stopped} stopped runs: same saved step on every process; resumed losses "
                 f"within {loss:.1e}",
        goal_=results_io.goal("SIGTERM to one host or to all", "same step on every host, "
                              "exact resume (<= 1e-5)", met), load_before=load_before,
        notes=f"{where}. The stop vote's cost per step: tools/stop_vote.py.")
  return results_io.result(
      "multihost_equivalence", "Multi-host equivalence", figures,
      anchor="the same mesh on one process (1 x 8 devices)",
      headline=f"{cells} cells <= {loss:.1e} relative loss difference, eval to {evals:.1e}",
      goal_=results_io.goal(what, "<= 1e-5, eval equal", met), load_before=load_before,
      notes=where)


def _layout(output: str) -> str:
  """'2 | 2' (row shards | hosts per block) from main's start-up line."""
  m = re.search(r"(\d+) row shards \(each block on (\d+) host", output)
  return f"{m.group(1)} | {m.group(2)}" if m else "? | ?"


if __name__ == "__main__":
  sys.exit(main())
