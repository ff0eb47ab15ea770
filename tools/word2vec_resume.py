"""What a word2vec resume inside an epoch costs the host: going on after batch k of an
epoch (`SkipGramBatches.epoch(e, resume=position)`) against building the epoch's batches,
and against redrawing batches 1..k to get there (what a resume would cost if the saved
position were only a batch count).

  .venv/bin/python tools/word2vec_resume.py [--at 0.25,0.5,0.75] [--reps 3] [--epochs 1]

configs/word2vec.py's stream on the embedded corpus (its defaults: window 5, 5 negatives,
subsampling 1e-3, 512 chunks of 256 pairs a batch), epoch 1, numpy on one thread (the host
side only: no device step). For each resume point k (a fraction of the epoch's batches):
seconds until the first batch after k is ready, best of --reps. The load average is
printed before and after.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The root, bench/ (bench_util) and the suites whose parts the probes reuse.
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "bench")] + [
    os.path.join(_ROOT, "bench", d) for d in ("time_to_quality", "finetune", "inference")]

from bert_jax.configs import word2vec as w2v_config  # noqa: E402
from bert_jax.word2vec import data as w2v_data  # noqa: E402


def best(fn, reps: int) -> float:
  """The least wall seconds of `reps` calls of fn()."""
  out = float("inf")
  for _ in range(reps):
    start = time.perf_counter()
    fn()
    out = min(out, time.perf_counter() - start)
  return out


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--at", default="0.25,0.5,0.75", help="resume points, fractions of an epoch")
  p.add_argument("--reps", type=int, default=3)
  args = p.parse_args()
  print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
  c = w2v_config.get_config()
  d, t = c.data, c.train
  sentences = w2v_data.load_corpus(d.corpus, d.text_glob)
  vocab = w2v_data.build_vocab(sentences, d.min_count)
  corpus = w2v_data.encode(sentences, vocab)
  batches = w2v_data.SkipGramBatches(
      corpus, vocab.counts, window=d.window, negatives=t.negatives, sample=d.sample,
      ns_exponent=t.ns_exponent, alpha=t.alpha, min_alpha=t.min_alpha, lr_decay=t.lr_decay,
      epochs=t.epochs, chunk_size=t.chunk_size, chunks=t.chunks_per_step, seed=c.seed)
  whole = list(batches.epoch(1))
  n = len(whole)
  epoch_s = best(lambda: list(batches.epoch(1)), args.reps)
  print(f"embedded corpus: {corpus.ids.shape[0]} tokens, vocabulary {len(vocab)}; epoch 2: "
        f"{n} batches of {batches.batch_pairs} pairs; building them all: {epoch_s:.2f} s "
        f"({1e3 * epoch_s / n:.0f} ms a batch)\n")
  print("| resume after batch | resume: next batch ready (s) | redraw 1..k, then the next (s) "
        "| resume / redraw |\n| --- | --- | --- | --- |")
  for frac in (float(x) for x in args.at.split(",")):
    k = max(0, min(n - 2, int(frac * n) - 1))
    position = whole[k]["position"]
    resume_s = best(lambda: next(batches.epoch(1, resume=position)), args.reps)
    redraw_s = best(lambda: [b for _, b in zip(range(k + 2), batches.epoch(1))], args.reps)
    print(f"| {k + 1} of {n} | {resume_s:.3f} | {redraw_s:.3f} | {resume_s / redraw_s:.2f} |",
          flush=True)
  print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
  main()
