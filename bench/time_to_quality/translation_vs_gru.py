r"""Transformer vs GRU + additive attention on the numbers corpus, same data, same wall clock.
With a budget of 15 minutes or more the Transformer's run is the README's translation
command to its end, so this writes translation.json (its goal) beside
translation_vs_gru.json.

  python bench/time_to_quality/translation_vs_gru.py --budget_minutes 15 --root /tmp/translation_vs_gru

Each model trains from its configs/translation.py arg (numbers, numbers_gru) in its own
process; at the budget the process gets SIGTERM, which the loop turns into a clean save
(a run that finishes its steps earlier just stops). Then, in this process, the newest
checkpoint of each translates the same never-seen test split with beam 4. Reported:
test BLEU / chrF / exact match, train tokens/s (the loop's own figure: padded source +
target tokens, the first log window with the compile left out) and decode sentences/s
(beam 4, batch 64, compile excluded). The runs are sequential, so they share the machine
with whatever else runs at the time: say so next to the figures. An earlier run's workdir
under --root is removed first (bert_jax.main would resume it, not train).

Writes bench/results/translation_vs_gru.json (tvg_result: both models' test BLEU, decode
and train speed, the load average around each run); --results-dir DIR writes it there
instead, --no-result prints its headline only. The carried result: --budget_minutes 8.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "bench")]
import results_io  # noqa: E402  pylint: disable=wrong-import-position

ARGS = {"Transformer": "numbers", "GRU + attention": "numbers_gru"}
SHORT = {"Transformer": "Transformer", "GRU + attention": "GRU"}  # the decoding rows' names


def train(arg: str, workdir: str, budget_s: float, overrides: list[str]) -> dict:
  cmd = [sys.executable, "-m", "bert_jax.main", "--config", f"configs/translation.py:{arg}",
         "--workdir", workdir, *overrides]
  env = dict(os.environ, PYTHONPATH=ROOT)
  if os.path.exists(workdir):  # it would be resumed: its old steps counted as this run's
    print(f"[translation_vs_gru] removing the earlier run in {workdir}", file=sys.stderr)
    shutil.rmtree(workdir)
  load_before = results_io.load()
  t0 = time.time()
  with open(os.path.join(os.path.dirname(workdir), f"{arg}.log"), "w") as log:
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    stopped = False
    try:
      proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
      proc.send_signal(signal.SIGTERM)  # the loop saves at the next step and exits
      proc.wait()
      stopped = True
  rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  train_rows = [r for r in rows if "perf/tokens_per_sec" in r]
  steady = train_rows[1:] or train_rows
  return {"wall_s": time.time() - t0, "steps": max(r["step"] for r in train_rows),
          "tokens_per_s": sum(r["perf/tokens_per_sec"] for r in steady) / len(steady),
          "returncode": proc.returncode, "stopped": stopped,
          "load": [load_before, results_io.load()]}


def evaluate(workdir: str, beam_size: int) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_jax import translate  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.translation import metrics  # pylint: disable=g-import-not-at-top
  task, params, step_dir = translate.load(workdir, "latest")
  src = os.path.join(workdir, "data", "test.de")
  refs = open(os.path.join(workdir, "data", "test.en"), encoding="utf-8").read().splitlines()
  _, features = task.read_input(src)
  fn = jax.jit(lambda p, s: task.search(p, s, beam_size))
  batches = list(task.predict_batches(features, 64))
  jax.block_until_ready(fn(params, batches[0]["src_ids"]))  # compile outside the clock
  t0 = time.perf_counter()
  hyps = [np.asarray(fn(params, b["src_ids"])) for b in batches]
  dt = time.perf_counter() - t0
  texts, _ = translate.translate(task, params, src, beam_size, 0.6, 64)
  scores = metrics.corpus_scores(texts, refs)
  n = sum(int((b["feature_index"] >= 0).sum()) for b in batches)
  del hyps
  return {"checkpoint": step_dir, "sentences_per_s": n / dt, **scores,
          "examples": list(zip(open(src, encoding="utf-8").read().splitlines()[:3],
                               texts[:3], refs[:3]))}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--budget_minutes", type=float, default=15.0)
  parser.add_argument("--root", default="/tmp/translation_vs_gru")
  parser.add_argument("--beam_size", type=int, default=4)
  parser.add_argument("--override", action="append", default=[],
                      help="extra --config.x=y flags for both runs")
  parser.add_argument("--results-dir", "--results_dir", dest="results_dir",
                      default=results_io.RESULTS_DIR,
                      help="where translation_vs_gru.json is written")
  parser.add_argument("--no-result", "--no_result", dest="no_result", action="store_true",
                      help="print the result's headline only; write no result file")
  args = parser.parse_args()
  from bert_jax import hardware  # pylint: disable=g-import-not-at-top
  hardware.configure()  # evaluate() runs jax here: as the CLIs, no TPU attempt without one
  load_before = results_io.load()
  os.makedirs(args.root, exist_ok=True)
  table = {}
  for name, arg in ARGS.items():
    workdir = os.path.join(args.root, arg)
    run = train(arg, workdir, args.budget_minutes * 60, args.override)
    table[name] = {**run, **evaluate(workdir, args.beam_size)}
    print(json.dumps({name: table[name]}, default=str), flush=True)
  print(f"\n| model | steps in {args.budget_minutes:g} min | test BLEU | chrF | exact match "
        f"| train tokens/s | decode sentences/s (beam {args.beam_size}) |")
  print("| --- | --- | --- | --- | --- | --- | --- |")
  for name, r in table.items():
    print(f"| {name} | {r['steps']} | {r['bleu']:.1f} | {r['chrf']:.1f} | "
          f"{100 * r['exact_match']:.1f}% | {r['tokens_per_s']:,.0f} | "
          f"{r['sentences_per_s']:.1f} |")
  results = [tvg_result(table, args.budget_minutes, args.beam_size, args.override,
                        load_before)]
  transformer = table["Transformer"]
  if transformer["returncode"] == 0 and not args.override and not transformer["stopped"]:
    results.append(readme_result(transformer, args.beam_size, load_before))
  for res in results:
    print(res["headline"])
    if not args.no_result:
      print("wrote", results_io.write(res, args.results_dir))


README_BUDGET_S = 15 * 60


def readme_result(r: dict, beam_size: int, load_before: float) -> dict:
  """bench/results/translation.json: the Transformer's run is the README's translation
  command (configs/translation.py:numbers to its end, inside the budget), scored on the
  test split as `bert_jax.translate --beam_size 4 --reference` scores it."""
  met = r["wall_s"] <= README_BUDGET_S and r["bleu"] >= 90 and r["exact_match"] >= 0.8
  return results_io.result(
      "translation", "Translation, numbers task",
      [results_io.figure(f"test split, beam {beam_size}: sacreBLEU", round(r["bleu"], 2),
                         "BLEU", f"chrF {r['chrf']:.2f}"),
       results_io.figure("exact match", round(100 * r["exact_match"], 1), "%"),
       results_io.figure("train wall clock, start to exit", round(r["wall_s"]), "s",
                         f"{r['wall_s'] / 60:.1f} min, {r['steps']} steps; load "
                         f"{r['load'][0]} -> {r['load'][1]}")],
      "the references (sacreBLEU on the test split)",
      f"BLEU {r['bleu']:.2f}, exact match {100 * r['exact_match']:.1f}%, "
      f"{r['wall_s'] / 60:.1f} min", load_before=load_before,
      goal_=results_io.goal("the README's translation command", "<= 15 min, BLEU >= 90, "
                            "exact >= 80%", met),
      notes="Measured by bench/time_to_quality/translation_vs_gru.py: its Transformer run "
            "is the README's command, to its end.")


def tvg_result(table: dict, budget_minutes: float, beam_size: int, overrides: list,
               load_before: float) -> dict:
  """bench/results/translation_vs_gru.json from main's table {model name: train() and
  evaluate()'s figures}: no goal, the GRU is the anchor."""
  figures = []
  for name, r in table.items():
    exit_note = f"; exit status {r['returncode']}" if r["returncode"] else ""
    figures.append(results_io.figure(
        f"{name}: test BLEU", round(r["bleu"], 1), "BLEU",
        f"{r['steps']} steps in {budget_minutes:g} min; chrF {r['chrf']:.1f}, exact match "
        f"{100 * r['exact_match']:.1f}%{exit_note}"))
  for name, r in table.items():
    figures.append(results_io.figure(f"{SHORT[name]}: decoding, beam {beam_size}",
                                     round(r["sentences_per_s"], 1), "sentences/s",
                                     "batch 64, compile excluded"))
  for name, r in table.items():
    figures.append(results_io.figure(f"{SHORT[name]}: training", round(r["tokens_per_s"]),
                                     "tokens/s", "padded source + target, the loop's figure"
                                     " after its first log window"))
  (t_name, t), (g_name, g) = table.items()
  loads = ", ".join(f"{r['load'][0]} -> {r['load'][1]} ({SHORT[n]})" for n, r in table.items())
  return results_io.result(
      "translation_vs_gru", "Transformer vs GRU with additive attention", figures,
      f"the pre-Transformer baseline, same data and {budget_minutes:g} minutes of wall clock",
      f"BLEU {t['bleu']:.1f} vs {g['bleu']:.1f}; decoding {t['sentences_per_s']:.0f} vs "
      f"{g['sentences_per_s']:.0f} sentences/s", load_before=load_before,
      notes=f"{t_name} vs {g_name}, sequential, so their neighbours differed; load average "
      f"before -> after each training: {loads}."
      + (f" Overrides for both: {' '.join(overrides)}." if overrides else ""))


if __name__ == "__main__":
  main()
