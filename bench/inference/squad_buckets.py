"""SQuAD in length buckets vs padded to max_seq_length: fill rate, compiles, eval speed.

  .venv/bin/python bench/inference/squad_buckets.py --questions 512 --timed-windows 128 --reps 2

No SQuAD is on this machine (tfds would download it), so the questions are built from
the embedded corpus (gensim's test data, bert_jax.data.corpora): a context is a run of
2-9 consecutive sentences of a document (SQuAD's paragraphs: ~5 sentences, ~120
words), its question the first 6-14 words of one of them (SQuAD's: ~10 words), the
answer that sentence's first word. Featurized as configs/finetune_squad.py does
(all-MiniLM-L6-v2's tokenizer, max_seq_length 384, doc_stride 128, max query 64),
then for the train stream (batch 32, windows of data.bucket_window = 32 batches, one
epoch) and the eval plan (batch 32):
* fill rate: real tokens / computed positions, padded to 384 vs in buckets of
  data.length_bucket = 64 (and 32), and the buckets used (= compiles of each step);
* eval speed: the jitted predict step of all-MiniLM-L6-v2 + span head over the first
  --timed-windows eval windows, padded vs bucketed, warm (each shape compiled before),
  repetitions interleaved (padded, bucketed, padded, ...), best of --reps; the outputs
  are compared (max |difference| of the real positions' logits).
The load average is printed before and after.

The result: bench/results/inference-squad_buckets.json (bench/results_io.py): each
split's fill rate and shapes per bucket step, the eval forward's seconds and speed-up,
the logit difference; the docstring states no goal, so none. --results-dir DIR writes it
there instead; --no-result only prints.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/

import numpy as np  # noqa: E402

import bench_util  # noqa: E402  (bench/, the script's own directory)
import results_io  # noqa: E402  pylint: disable=wrong-import-position

STEPS = (0, 32, 64)


def squad_json(n: int, seed: int = 0) -> dict:
  """n questions on paragraphs of the embedded corpus (see the module docstring)."""
  from bert_jax.data import corpora, text_cleaning  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  paragraphs = []
  for document in corpora.embedded_documents(text_cleaning.Stats()):
    sentences = [" ".join(s.split()) for s in document if len(s.split()) >= 4]
    at = 0
    while at < len(sentences) and len(paragraphs) < n:
      k = int(rng.integers(2, 10))
      para = sentences[at:at + k]
      at += k
      if len(para) < 2:
        break
      pick = int(rng.integers(len(para)))
      context = " ".join(para)
      start = len(" ".join(para[:pick])) + (1 if pick else 0)
      words = para[pick].split()
      question = " ".join(words[:int(rng.integers(6, 15))]) + "?"
      paragraphs.append({"context": context, "qas": [{
          "id": f"q{len(paragraphs)}", "question": question,
          "answers": [{"text": words[0], "answer_start": start}]}]})
    if len(paragraphs) >= n:
      break
  return {"data": [{"title": "embedded", "paragraphs": paragraphs}]}


def squad_task(path: str, length_bucket: int, workdir: str):
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  from configs import finetune_squad  # pylint: disable=g-import-not-at-top
  c = finetune_squad.get_config("file")
  c.data.update(train_file=path, eval_file=path, length_bucket=length_bucket)
  task = registry.get_task(c)
  task.prepare(workdir)
  return task


def fill_rates(task, batch: int = 32) -> dict:
  from bert_jax.data import buckets  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.finetune import bucketed  # pylint: disable=g-import-not-at-top
  out = {}
  for split, features in (("train", task.train_features), ("eval", task.eval_features)):
    lengths = bucketed.row_lengths(features)
    result = {"windows": len(lengths), "mean_tokens": float(lengths.mean())}
    for step in STEPS:
      lens = buckets.bucket_lengths(task.seq_len, step)
      if split == "train":
        keys = buckets.BucketTrainKeys(lengths, lens, batch, 0, 1, seed=0,
                                       window_batches=task.bucket_window)
        batches = [keys(j) for j in range(-(-len(lengths) // batch))]
      else:
        plan = buckets.eval_plan(lengths, lens, batch)
        batches = [plan(i) for i in range(len(plan))]
      result[step] = {"fill": buckets.fill_rate(lengths, batches),
                      "shapes": sorted({int(l) for _, l in batches})}
    out[split] = result
  return out


def time_eval(tasks: dict, windows: int, reps: int, batch: int = 32) -> dict:
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from bert_jax.train import steps  # pylint: disable=g-import-not-at-top
  padded = tasks[0]
  shapes = nn.unbox(jax.eval_shape(padded.init, jax.random.key(0),
                                   padded.dummy_batch(1, padded.seq_len))["params"])
  rng = np.random.default_rng(0)
  template = jax.tree_util.tree_map(
      lambda x: (0.02 * rng.standard_normal(x.shape)).astype(x.dtype), shapes)
  params = jax.device_put(padded.load_pretrained_params(padded.config.init_from, template))
  predict = jax.jit(functools.partial(steps.predict_step, task=padded))

  def run(task):
    features = {k: v[:windows] for k, v in task.eval_features.items()}
    outs = [predict(params, b) for b in task.predict_batches(features, batch)]
    outs = jax.device_get(outs)
    return task.ordered({k: np.concatenate([o[k] for o in outs]) for k in outs[0]})

  got = {k: run(t) for k, t in tasks.items()}            # compiles every shape
  real = padded.eval_features["input_mask"][:windows] > 0
  diff = max(float(np.abs(got[64][k] - got[0][k])[real].max())
             for k in ("start_logits", "end_logits"))
  seconds = {k: [] for k in tasks}
  for _ in range(reps):
    for k, t in tasks.items():
      t0 = time.perf_counter()
      run(t)
      seconds[k].append(time.perf_counter() - t0)
  return {"seconds": seconds, "max_abs_diff": diff}


def step_name(step: int) -> str:
  return "padded to 384" if not step else f"buckets of {step}"


def squad_result(args, seq_len: int, rates: dict, timing, load_before: float) -> dict:
  """bench/results/inference-squad_buckets.json: every printed row a figure, no goal."""
  figures = []
  for split, r in rates.items():
    figures.append(results_io.figure(f"{split}: real tokens a window", round(
        r["mean_tokens"], 1), "tokens", f"{r['windows']} windows of {seq_len}"))
    for step in STEPS:
      figures.append(results_io.figure(
          f"{split} fill rate, {step_name(step)}", round(100 * r[step]["fill"], 1), "%",
          f"{len(r[step]['shapes'])} shapes (compiles): {r[step]['shapes']}"))
  head = "; ".join(f"{split} fill {100 * r[0]['fill']:.0f}% padded to {seq_len} -> "
                   f"{100 * r[64]['fill']:.0f}% in buckets of 64"
                   for split, r in rates.items())
  if timing:
    best = {k: min(v) for k, v in timing["seconds"].items()}
    what = f"eval forward, {args.timed_windows} windows, batch 32, warm"
    for step in (0, 64):
      figures.append(results_io.figure(
          f"{what}, {step_name(step)}", round(best[step], 3), "s",
          f"best of {args.reps}: " + ", ".join(f"{x:.2f}" for x in timing["seconds"][step])))
    figures.append(results_io.figure(f"{what}: padded / buckets of 64",
                                     round(best[0] / best[64], 2), "x", "seconds"))
    figures.append(results_io.figure("max |logit difference| at real positions",
                                     float(f"{timing['max_abs_diff']:.2e}"), ""))
    head += f"; eval forward {best[0] / best[64]:.2f}x"
  return results_io.result(
      "inference", "SQuAD length buckets (fill rate, eval speed)", figures,
      f"the same windows padded to max_seq_length {seq_len}", head, case="squad_buckets",
      load_before=load_before,
      notes=f"{args.questions} questions built from the embedded corpus (no SQuAD on the "
            "machine); all-MiniLM-L6-v2 + span head, batch 32.")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--questions", type=int, default=512)
  parser.add_argument("--timed-windows", type=int, default=128)
  parser.add_argument("--reps", type=int, default=2)
  parser.add_argument("--results-dir", default=results_io.RESULTS_DIR,
                      help="where the result JSON goes (default bench/results)")
  parser.add_argument("--no-result", action="store_true", help="print only")
  args = parser.parse_args()
  bench_util.header("squad_buckets")
  load_before = results_io.load()
  t = None
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "qa.json")
    with open(path, "w", encoding="utf-8") as f:
      json.dump(squad_json(args.questions), f)
    tasks = {step: squad_task(path, step, os.path.join(tmp, f"w{step}")) for step in (0, 64)}
    rates = fill_rates(tasks[64])
    for split, r in rates.items():
      print(f"{split}: {r['windows']} windows, {r['mean_tokens']:.1f} real tokens a window "
            f"(of {tasks[64].seq_len})")
      for step in STEPS:
        print(f"  {step_name(step):16} fill {100 * r[step]['fill']:5.1f}%  shapes (compiles) "
              f"{len(r[step]['shapes'])}: {r[step]['shapes']}")
    if args.timed_windows:
      t = time_eval(tasks, args.timed_windows, args.reps)
      best = {k: min(v) for k, v in t["seconds"].items()}
      print(f"eval forward, {args.timed_windows} windows, batch 32, warm, best of "
            f"{args.reps}: padded {best[0]:.2f} s ({t['seconds'][0]}), buckets of 64 "
            f"{best[64]:.2f} s ({t['seconds'][64]}): {best[0] / best[64]:.2f}x; max |logit "
            f"difference| at real positions {t['max_abs_diff']:.2e}")
    seq_len = tasks[64].seq_len
  print(bench_util.load_line("end"))
  res = squad_result(args, seq_len, rates, t, load_before)
  print(res["title"], "-", res["headline"])
  if not args.no_result:
    print("wrote", results_io.write(res, args.results_dir))


if __name__ == "__main__":
  main()
