"""Our word2vec against gensim's Word2Vec on the same sentences, same machine, same cores.

  JAX_PLATFORMS=cpu python bench/word2vec/vs_gensim.py --seeds 1,2,3,4,5 \\
      --sides ours,gensim-w1,gensim-w2

Sides (interleaved per seed, in the order given, so all see the same background load):
  ours        configs/word2vec.py's defaults: gensim 4's learning-rate decay by sentences and
              its initial vector scale (train.lr_decay=sentences, model.init_scale=1.0)
  ours-words  word2vec.c's decay by words and its initial scale (lr_decay=words,
              init_scale=0.5): our default before issue 31
  gensim-w1   gensim 4's `Word2Vec(sentences, ...)` with workers=1
  gensim-w2   the same with workers=2
All train skip-gram with negative sampling (sg=1, hs=0, negative=5, vector_size=100,
window=5, min_count=5, sample=1e-3, epochs=5, alpha 0.025 -> 1e-4) on the embedded corpus
(bert_jax.word2vec.data.embedded_corpus(), one sentence = one line of a file written from
it: --order enwiki-first as configs/word2vec.py trains it, or lee-first) or on --corpus_file
(one sentence a line, `simple_preprocess`ed for both).

words/s is effective words per second of training, for both: effective words are the
in-vocabulary tokens that survive subsampling (gensim's `trained_word_count`, what its
log calls "effective words"; ours counts the same tokens), divided by the wall time of
training. gensim: `model.train(...)` after `build_vocab` (what `Word2Vec(sentences)` runs,
with total_examples=corpus_count). Ours: the training loop of `train_and_evaluate` after
the vocabulary, the state and the compiled step exist (host batch pipeline, every device
step, the final sync); the XLA compilation of the step (about 0.5 s) is timed apart and
shown as "incl. compile" too. Corpus loading and vocabulary building are outside both
clocks.

Scores: WordSim-353 and SimLex-999 Spearman, Google analogy accuracy (restrict_vocab
300000), all by gensim's own KeyedVectors.evaluate_* (ours on our exported vectors,
loaded into gensim: the same numbers our evaluator logs). The table gives mean ± sample
standard deviation over the seeds.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/

from bert_jax.hardware import cpu_threads  # noqa: E402  (before jax starts: see below)

# One XLA thread, the other core for the host pipeline (what train_and_evaluate does when
# it starts the backend itself; here the backend must start before anything else).
cpu_threads.start_cpu_backend_single_threaded()

from bert_jax.word2vec import train as task  # noqa: E402

import numpy as np  # noqa: E402
from gensim.models import KeyedVectors, Word2Vec  # noqa: E402

import bench_util  # noqa: E402
import results_io  # noqa: E402
import summary  # noqa: E402  (bench/word2vec/summary.py)
from bert_jax.word2vec import data as w2v_data  # noqa: E402
from bert_jax.word2vec import model as w2v_model  # noqa: E402

SIDES = ("ours", "ours-words", "gensim-w1", "gensim-w2")


def load_config(path):
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location("word2vec_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def gensim_scores(kv: KeyedVectors) -> dict:
  from gensim.test.utils import datapath  # pylint: disable=g-import-not-at-top
  return dict(wordsim353=kv.evaluate_word_pairs(datapath("wordsim353.tsv"))[1][0],
              simlex999=kv.evaluate_word_pairs(datapath("simlex999.txt"))[1][0],
              analogy=kv.evaluate_word_analogies(datapath("questions-words.txt"))[0])


def run_ours(config, side: str, seed: int, workdir: str) -> dict:
  config = config.copy_and_resolve_references()
  config.seed = seed
  if side == "ours-words":
    config.train.lr_decay, config.model.init_scale = "words", w2v_model.WORD2VEC_C_INIT_SCALE
  out = task.train_and_evaluate(config, workdir)
  m = out["metrics"]
  kv = KeyedVectors.load_word2vec_format(os.path.join(workdir, "vectors.bin"), binary=True)
  return dict(seconds=m["train_seconds"], words=m["effective_words"],
              words_per_sec=m["words_per_sec"],
              words_per_sec_with_compile=m["words_per_sec_with_compile"], **gensim_scores(kv))


def run_gensim(sentences, workers: int, seed: int, epochs: int, alpha: float) -> dict:
  model = Word2Vec(sg=1, hs=0, negative=5, vector_size=100, window=5, min_count=5,
                   sample=1e-3, workers=workers, seed=seed, alpha=alpha, min_alpha=1e-4)
  model.build_vocab(sentences)
  start = time.time()
  effective, _ = model.train(sentences, total_examples=model.corpus_count, epochs=epochs)
  seconds = time.time() - start
  return dict(seconds=seconds, words=effective, words_per_sec=effective / seconds,
              words_per_sec_with_compile=effective / seconds, **gensim_scores(model.wv))


def mean_sd(values, fmt: str) -> str:
  values = np.asarray(values, np.float64)
  sd = values.std(ddof=1) if values.size > 1 else 0.0
  return f"{values.mean():{fmt}} ± {sd:{fmt}}"


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--seeds", default="1,2,3")
  parser.add_argument("--sides", default="ours,gensim-w1,gensim-w2",
                      help=f"comma-separated, of {', '.join(SIDES)}")
  parser.add_argument("--corpus_file", default="",
                      help="one sentence a line (default: the embedded corpus)")
  parser.add_argument("--order", default="enwiki-first", choices=("enwiki-first", "lee-first"),
                      help="the embedded corpus's lines: as configs/word2vec.py trains it "
                      "(the enwiki articles, then the Lee stories) or the Lee stories first")
  parser.add_argument("--epochs", type=int, default=5)
  parser.add_argument("--alpha", type=float, default=0.025)
  parser.add_argument("--no_result", action="store_true",
                      help="print only; no bench/results/word2vec_vs_gensim.json")
  args = parser.parse_args()
  sides = args.sides.split(",")
  unknown = sorted(set(sides) - set(SIDES))
  if unknown:
    parser.error(f"unknown --sides {unknown}; choose from {', '.join(SIDES)}")
  bench_util.header("word2vec_vs_gensim")
  load_before = results_io.load()
  config = load_config(os.path.join(bench_util.ROOT, "configs", "word2vec.py"))
  config.train.epochs, config.train.alpha, config.export_format = args.epochs, args.alpha, "binary"
  with tempfile.TemporaryDirectory() as tmp:
    corpus_file = args.corpus_file
    if not corpus_file:  # the embedded corpus as a file: both sides read the same lines
      corpus_file = os.path.join(tmp, "embedded.txt")
      lee, enwiki = w2v_data.lee_sentences(), w2v_data.enwiki_sentences()
      written = lee + enwiki if args.order == "lee-first" else enwiki + lee
      with open(corpus_file, "w", encoding="utf8") as f:
        f.writelines(" ".join(s) + "\n" for s in written)
    config.data.corpus, config.data.text_glob = "text", corpus_file
    sentences = w2v_data.text_corpus(corpus_file)
    if not args.corpus_file and sentences != [list(s) for s in written]:
      raise SystemExit("word2vec_vs_gensim: the embedded corpus's file reads back other "
                       "sentences through simple_preprocess")
    print(f"corpus: {len(sentences)} sentences, {sum(map(len, sentences))} words "
          f"({args.corpus_file or 'the embedded corpus, ' + args.order})")
    rows = {side: [] for side in sides}
    for seed in [int(s) for s in args.seeds.split(",")]:
      for side in sides:
        if side.startswith("gensim"):
          r = run_gensim(sentences, int(side[-1]), seed, args.epochs, args.alpha)
        else:
          r = run_ours(config, side, seed, os.path.join(tmp, f"{side}{seed}"))
        rows[side].append(r)
        print(f"seed {seed} {side:10s}: {r['words_per_sec']:9,.0f} words/s ({r['words']} "
              f"words in {r['seconds']:.1f}s; incl. compile "
              f"{r['words_per_sec_with_compile']:,.0f}) | WS353 {r['wordsim353']:.3f} "
              f"| SimLex {r['simlex999']:.3f} | analogy {r['analogy']:.4f}", flush=True)
  print(bench_util.load_line("end"))
  print("| side | words/s | words/s incl. compile | WordSim-353 ρ | SimLex-999 ρ | analogy acc |")
  print("|---|---|---|---|---|---|")
  for side, rs in rows.items():
    col = lambda k: [r[k] for r in rs]  # pylint: disable=cell-var-from-loop
    print(f"| {side} ({len(rs)} seeds) | {mean_sd(col('words_per_sec'), ',.0f')} "
          f"| {mean_sd(col('words_per_sec_with_compile'), ',.0f')} "
          f"| {mean_sd(col('wordsim353'), '.3f')} | {mean_sd(col('simlex999'), '.3f')} "
          f"| {mean_sd(col('analogy'), '.4f')} |")
  if not args.no_result:
    print("wrote", results_io.write(summary.result(rows, args.order, load_before)))


if __name__ == "__main__":
  main()
