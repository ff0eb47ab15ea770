"""ModernBERT-tiny against BERT-tiny :demo: held-out fill-mask accuracy against the clock
on the same corpus, vocabulary, scorer and minutes (bench/RESULTS.md).

  .venv/bin/python bench/time_to_quality/modernbert_demo.py [--budget 360 --every 60]

1. Data: configs/bert_tiny.py:demo prepares the embedded corpus through bert_jax (cached
   in --data_dir); configs/modernbert.py:tiny has the same data section (checked: a
   field that differs is an error), so it reads the same prepared rows and 4,096-token
   vocabulary. The held-out documents become the scorer's fixed masked set for that
   vocabulary (bench/time_to_quality/scorer.py, seed 0, BERT's 15%), drawn once and kept
   in OUT: time_to_quality.py's own set when OUT is its OUT. Off every clock.
2. Both configs train in ours_worker.py for --budget seconds of training clock (the
   schedules fitted to it), scored every --every seconds with the clock paused, taking
   turns on the cores slice by slice (stages.run_interleaved), so both meet the same hour
   of a shared machine.
3. The result, bench/results/modernbert_demo.json (--results-dir DIR: there instead;
   --no-result: its headline only): each system's accuracy at 2, 4 and 6 minutes
   (curves.MARKS_S; thirds of another --budget), final accuracy, steps, tokens/s and its
   curve. OUT/runs.json keeps the runs (summaries, curves, slices); --picture PATH draws
   the two curves.
Bad input (a data section that differs, a run that fails) is one line, exit status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Optional

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
_BENCH = os.path.dirname(BENCH_DIR)
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/
import bench_util  # noqa: E402  pylint: disable=wrong-import-position
import curves  # noqa: E402  pylint: disable=wrong-import-position
import results_io  # noqa: E402  pylint: disable=wrong-import-position
import scorer as ttq_scorer  # noqa: E402  pylint: disable=wrong-import-position
import stages  # noqa: E402  pylint: disable=wrong-import-position

# run name -> (stages.CONFIGS key, short name, label); the reference first.
SYSTEMS = {"ours_demo": ("demo", "BERT-tiny :demo", "configs/bert_tiny.py:demo"),
           "ours_modernbert": ("modernbert", "ModernBERT-tiny", "configs/modernbert.py:tiny")}
REFERENCE, CANDIDATE = SYSTEMS


def data_differences() -> list[str]:
  """`field: a vs b` for every config.data field where the two configs differ."""
  import ours_worker  # pylint: disable=g-import-not-at-top
  a, b = (ours_worker.load_config(os.path.join(bench_util.ROOT, stages.CONFIGS[key]),
                                  {}).data.to_dict() for key, _, _ in SYSTEMS.values())
  return [f"{k}: {a.get(k, '(unset)')!r} vs {b.get(k, '(unset)')!r}"
          for k in sorted(set(a) | set(b)) if a.get(k, "(unset)") != b.get(k, "(unset)")]


def marks(budget: float) -> tuple:
  """The issue's 2/4/6 minutes at the default budget; thirds of any other."""
  if budget == curves.MARKS_S[-1]:
    return curves.MARKS_S
  return tuple(budget * k / 3 for k in (1, 2, 3))


def mark_name(seconds: float) -> str:
  return f"{seconds / 60:g} min" if seconds % 60 == 0 else f"{seconds:.0f} s"


def prepare_masked(args) -> str:
  """Step 1: the path of the fixed masked set, after checking the two share the data."""
  differ = data_differences()
  if differ:
    raise bench_util.BenchError("the configs' data sections differ, so their curves do not "
                                "compare: " + "; ".join(differ))
  config, demo = stages.prepare("demo", args.data_dir)
  _, modern = stages.prepare("modernbert", args.data_dir)  # the cache :demo just filled
  if (modern.documents_dir, modern.vocab_path) != (demo.documents_dir, demo.vocab_path):
    raise bench_util.BenchError("the two configs prepared different documents or vocabularies")
  docs = stages.validation_documents(demo.documents_dir)
  path = stages.masked_set(demo, docs, args.out, int(config.data.max_seq_length))
  held = ttq_scorer.load(path)
  print(f"data: {len(docs)} held-out documents -> {len(held['input_ids'])} rows, "
        f"{int(held['weights'].sum())} masked positions ({demo.vocab_size} vocabulary)",
        flush=True)
  return path


def _curve_text(curve: list) -> str:
  return ", ".join(f"{p['seconds']:.0f} s {p['accuracy']:.4f}" for p in curve)


def bench_result(runs: dict, budget: float, every: float,
                 load_before: Optional[float]) -> dict:
  """bench/results/modernbert_demo.json from the two runs ({name: {"summary", "curve",
  "slices"}}, run_interleaved's answer)."""
  at = marks(budget)
  figures, final = [], {}
  for name, (_, short, label) in SYSTEMS.items():
    c, s = runs[name]["curve"], runs[name]["summary"]
    final[name] = curves.accuracy_at(c, at[-1])
    figures += [results_io.figure(f"{short} accuracy at {mark_name(m)}",
                                  round(curves.accuracy_at(c, m), 4), "accuracy")
                for m in at]
    figures += [
        results_io.figure(f"{short} final accuracy", round(c[-1]["accuracy"], 4), "accuracy",
                          f"{label}, at {c[-1]['seconds']:.0f} s ({s['stopped']})"),
        results_io.figure(f"{short} steps", s["steps"], "", f"batch {s.get('batch_size', '?')}"
                          f", schedule fitted to {s.get('num_steps', '?')} steps"),
        results_io.figure(f"{short} tokens/s", round(s["steady_tokens_per_s"]), "tokens/s",
                          "real tokens after the first two steps (compile excluded)"),
        results_io.figure(f"{short} curve", _curve_text(c), "",
                          "training clock, held-out accuracy")]
  ref, cand = (SYSTEMS[n][1] for n in (REFERENCE, CANDIDATE))
  ratio = final[CANDIDATE] / max(final[REFERENCE], 1e-9)
  figures.append(results_io.figure(f"{cand} / {ref} accuracy at {mark_name(at[-1])}",
                                   round(ratio, 2), "x"))
  per_round = stages.slice_ratios(runs[CANDIDATE].get("slices") or [],
                                  runs[REFERENCE].get("slices") or [])
  if per_round:
    figures.append(results_io.figure(
        f"tokens/s, {cand} / {ref}", round(statistics.median(per_round), 2), "x",
        f"median of {len(per_round)} interleaved slices ({min(per_round):.2f}-"
        f"{max(per_round):.2f}x)"))
  headline = (f"at {mark_name(at[-1])}: {cand} {final[CANDIDATE]:.4f}, {ref} "
              f"{final[REFERENCE]:.4f} held-out fill-mask accuracy ({ratio:.2f}x)")
  load_after = results_io.load()
  notes = (f"One window on one machine, load average {load_before} before and {load_after} "
           f"after (a shared CPU moves these figures). The two runs took turns on the cores "
           f"in slices of {every:g} s of training clock (run_interleaved), each schedule "
           f"fitted to the {budget:g}-s budget, scored on one fixed masked set of the "
           f"held-out documents (scorer.py, BERT's 15%).")
  return results_io.result(
      "modernbert_demo", "ModernBERT-tiny vs BERT-tiny demo", figures,
      "configs/bert_tiny.py:demo, same corpus, vocabulary, scorer and minutes", headline,
      load_before=load_before, notes=notes)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", default="/tmp/modernbert_demo", help="work dir")
  parser.add_argument("--data_dir", default="~/bert_jax_data",
                      help="where bert_jax prepares the corpus (cached; the configs' default)")
  parser.add_argument("--budget", type=float, default=360.0, help="training seconds per run")
  parser.add_argument("--every", type=float, default=60.0, help="seconds between scores")
  parser.add_argument("--picture", default="", help="a PNG of the two curves (none: no picture)")
  parser.add_argument("--results-dir", "--results_dir", dest="results_dir",
                      default=results_io.RESULTS_DIR)
  parser.add_argument("--no-result", "--no_result", dest="no_result", action="store_true",
                      help="print the bench result's headline only; write no result file")
  # What stages.ours_spec reads: the configs as they are, schedules fitted to the budget.
  parser.set_defaults(ours_overrides={}, fit_steps=True)
  args = parser.parse_args()
  try:
    run(args)
  except bench_util.BenchError as e:
    bench_util.fail("modernbert_demo", str(e))


def run(args) -> None:
  load_before = results_io.load()
  bench_util.header("modernbert_demo")
  os.makedirs(args.out, exist_ok=True)
  args.data_dir = os.path.expanduser(args.data_dir)
  masked = prepare_masked(args)
  data = {"masked_demo": masked, "masked_modernbert": masked}  # one vocabulary, one set
  runs = stages.run_interleaved(
      [(name, "ours", stages.ours_spec(key, data, args.budget, args.every, args))
       for name, (key, _, _) in SYSTEMS.items()], args)
  with open(os.path.join(args.out, "runs.json"), "w", encoding="utf-8") as f:
    json.dump(runs, f, indent=1)
  if args.picture:
    labelled = {n: {**r, "label": f"{SYSTEMS[n][1]} ({SYSTEMS[n][2]})"} for n, r in runs.items()}
    curves.picture(labelled, args.picture, f"{args.budget:g} s of training clock each, taking "
                   "turns; held-out fill-mask accuracy, 4,096 vocabulary", marks(args.budget))
    print("picture:", args.picture)
  res = bench_result(runs, args.budget, args.every, load_before)
  print(bench_util.load_line("end"))
  print(res["headline"])
  for f in res["figures"]:
    print(f"  {f['name']}: {f['value']} {f['unit']}".rstrip())
  if not args.no_result:
    print("wrote", results_io.write(res, args.results_dir), flush=True)


if __name__ == "__main__":
  main()
