"""Which recipe moves the demo's held-out MLM accuracy (bench/RESULTS.md "Demo recipe").

Each variant is configs/bert_tiny.py:bert (BERT's original recipe) plus the overrides of
one or more Cramming moves (Geiping & Goldstein 2022), trained for the same number of
steps; its held-out accuracy is scored with the two count baselines on the same masked
positions (bert_jax/apps/demo_report.py). Quality is not timing-sensitive, so run it under the
shared CPU lock; steps/s for the 8-minute budget come from `--time` runs on an idle machine:

  /work/tools/cpu python bench/time_to_quality/demo_recipe.py --steps 1200 --variants bert,nsp_off,...
  /work/tools/bench-idle python bench/time_to_quality/demo_recipe.py --time --steps 150 --variants ...

Prints one JSON line per variant (accuracy, baselines, or steps/s after the compile), then
writes bench/results/demo_recipe.json (accuracy runs) or demo_recipe-time.json (--time):
the variants of this one invocation, against the variant "bert" (no moves) when it is
among them and the count baselines (recipe_result; no goal). --results-dir DIR writes it
there instead; --no-result prints its headline only.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/
from bench import bench_util  # noqa: E402  pylint: disable=g-import-not-at-top
import results_io  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

# The moves, as config overrides on top of configs/bert_tiny.py:bert.
MOVES = {
    "nsp_off": {"data.mode": "mlm_packed"},
    "pre_ln": {"model.pre_ln": True},
    "dropout_off": {"model.dropout_rate": 0.0},
    # One-cycle: linear up to the peak at half the run, linear down to 0 at the end.
    "one_cycle": {"train.warmup_fraction": 0.5},
    "vocab4k": {"model.vocab_size": 4096, "data.vocab_size": 4096},
    "vocab2k": {"model.vocab_size": 2048, "data.vocab_size": 2048},
    "lr2e3": {"train.learning_rate": 2e-3},
    "lr3e3": {"train.learning_rate": 3e-3},
    "lr4e3": {"train.learning_rate": 4e-3},
    "batch64": {"train.batch_size": 64},
    "batch128": {"train.batch_size": 128},
    "batch16": {"train.batch_size": 16},
    "seq64": {"data.max_seq_length": 64, "data.max_predictions_per_seq": 10},
    "wd0.1": {"train.weight_decay": 0.1},
    # More predictions per sequence (Wettig et al. 2023: 40% beats 15% for MLM), scored on
    # the same 15% validation masks as every other row.
    "mask30": {"data.masked_lm_prob": 0.3, "data.max_predictions_per_seq": 40,
               "data.eval_masked_lm_prob": 0.15},
    "b2_98": {"train.b2": 0.98},
    "lr6e3": {"train.learning_rate": 6e-3},
    "lr1e2": {"train.learning_rate": 1e-2},
    "mask40": {"data.masked_lm_prob": 0.4, "data.max_predictions_per_seq": 52,
               "data.eval_masked_lm_prob": 0.15},
    # Relative positions in attention (RoPE, Su et al. 2021) instead of BERT's learned
    # absolute table: "my left neighbour" is one rotation for every position.
    "rotary": {"model.position": "rotary"},
    "sinusoidal": {"model.position": "sinusoidal"},
    # Mask every piece of a word together (BERT's later whole-word-masking release): a
    # multi-piece content word cannot be read off its own other pieces.
    "wwm": {"data.whole_word_mask": True},
    # Depth for steps: 4 layers instead of bert/tiny's 2 (same width).
    "layers4": {"model.num_layers": 4},
}


def overrides(variant: str) -> dict:
  """'bert' or moves joined by '+', e.g. 'nsp_off+pre_ln+dropout_off'."""
  out = {}
  if variant != "bert":
    for move in variant.split("+"):
      if move not in MOVES:
        raise bench_util.BenchError(f"unknown move {move!r}; known: {sorted(MOVES)}")
      out.update(MOVES[move])
  return out


def run_variant(python: str, variant: str, steps: int, root: str, data_dir: str,
                timing: bool, config: str) -> dict:
  workdir = os.path.join(root, variant + ("_time" if timing else ""))
  if os.path.exists(workdir):
    # An earlier run's workdir would be resumed at its last step: no training, its old
    # figures reported as this run's.
    print(f"[demo_recipe] removing the earlier run in {workdir}", file=sys.stderr)
    shutil.rmtree(workdir)
  flags = {"train.num_steps": steps, "train.eval_every": 0 if timing else steps,
           "train.eval_steps": 0, "train.checkpoint_every": steps, "train.log_every": 50,
           "train.warmup_steps": max(1, steps // 10), "data.data_dir": data_dir,
           "progress": False, **overrides(variant)}
  argv = [python, "-m", "bert_jax.main", f"--config={config}", f"--workdir={workdir}"]
  argv += [f"--config.{k}={v}" for k, v in flags.items()]
  subprocess.run(argv, check=True, env=bench_util.child_env(), stdout=subprocess.DEVNULL)
  rows = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
  result = {"variant": variant, "steps": steps}
  if timing:  # the windows after the first (which holds the compile)
    times = [r["perf/step_time_s"] for r in rows if "perf/step_time_s" in r][1:]
    result["steps_per_s"] = len(times) / sum(times) if times else float("nan")
    return result
  from bert_jax import demo_report  # pylint: disable=g-import-not-at-top
  with open(os.devnull, "w") as null:
    got = demo_report.report(workdir, demo_report.DEMO_TEXTS, out=null)
  acc = got["accuracy"]
  final = [r for r in rows if "train/loss" in r][-1]
  result.update(model=acc["model"], most_frequent=acc["most frequent"], bigram=acc["bigram"],
                train_loss=final["train/loss"],
                top1=[masks[0][0][0] for masks in got["fills"]],  # per DEMO_TEXTS
                top5=[[w for w, _ in masks[0]] for masks in got["fills"]])
  return result


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--variants", required=True, help="comma-separated variants")
  parser.add_argument("--steps", type=int, default=1200)
  parser.add_argument("--time", action="store_true", help="steps/s only (no eval)")
  parser.add_argument("--root", default="/tmp/demo_recipe")
  parser.add_argument("--data_dir", default="/tmp/demo_recipe_data")
  parser.add_argument("--config", default="configs/bert_tiny.py:bert")
  parser.add_argument("--python", default=sys.executable)
  parser.add_argument("--results-dir", "--results_dir", dest="results_dir",
                      default=results_io.RESULTS_DIR, help="where the result file is written")
  parser.add_argument("--no-result", "--no_result", dest="no_result", action="store_true",
                      help="print the result's headline only; write no result file")
  args = parser.parse_args()
  load_before = results_io.load()
  print(json.dumps({"command": " ".join(sys.argv), "load_start": bench_util.load_line("start")}),
        flush=True)
  rows = []
  for variant in args.variants.split(","):
    rows.append(run_variant(args.python, variant, args.steps, args.root, args.data_dir,
                            args.time, args.config))
    print(json.dumps(rows[-1]), flush=True)
  print(json.dumps({"load_end": bench_util.load_line("end")}), flush=True)
  res = recipe_result(rows, args.time, args.steps, args.config, load_before)
  print(res["headline"])
  if not args.no_result:
    print("wrote", results_io.write(res, args.results_dir))


def recipe_result(rows: list, timing: bool, steps: int, config: str,
                  load_before: float) -> dict:
  """The result of one invocation's variants (run_variant's rows): held-out accuracy
  with the baselines, or (timing) steps/s; the docstring states no goal."""
  anchor = f"{config} with no moves (variant 'bert') at the same {steps} steps"
  notes = (f"Each variant trained from scratch for {steps} steps on top of {config}, one "
           "after the other in this invocation (moves: demo_recipe.MOVES).")
  if timing:
    figures = [results_io.figure(f"{r['variant']}: training speed", round(r["steps_per_s"], 2),
                                 "steps/s", "the log windows after the first (the compile)")
               for r in rows]
    by = sorted(rows, key=lambda r: r["steps_per_s"])
    fast, slow = by[-1], by[0]
    headline = "steps/s " + (
        ", ".join(f"{r['variant']} {r['steps_per_s']:.2f}" for r in rows) if len(rows) <= 3
        else f"{fast['variant']} {fast['steps_per_s']:.2f} (fastest) to {slow['variant']} "
        f"{slow['steps_per_s']:.2f} (slowest) over {len(rows)} variants")
    return results_io.result(
        "demo_recipe", "Demo recipe, steps/s", figures, anchor, headline, case="time",
        load_before=load_before, notes=notes + " Steps/s: the machine's load is in it.")
  figures = [results_io.figure(
      f"{r['variant']}: held-out MLM accuracy", round(r["model"], 4), "accuracy",
      f"most frequent {r['most_frequent']:.4f}, bigram {r['bigram']:.4f}; final train loss "
      f"{r['train_loss']:.2f}; top-1 " + ", ".join(r["top1"])) for r in rows]
  best = max(rows, key=lambda r: r["model"])
  bert = next((r for r in rows if r["variant"] == "bert"), None)
  headline = (f"best {best['variant']} {best['model']:.4f} at {steps} steps"
              + (f" vs bert {bert['model']:.4f}" if bert and bert is not best else "")
              + f"; most frequent {best['most_frequent']:.4f}, bigram {best['bigram']:.4f}")
  return results_io.result("demo_recipe", "Demo recipe", figures, anchor + "; the count "
                           "baselines on the same masked positions (bert_jax/apps/demo_report.py)",
                           headline,
                           load_before=load_before, notes=notes)


if __name__ == "__main__":
  main()
