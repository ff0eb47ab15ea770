"""Our word2vec against gensim's Word2Vec on the embedded corpus, same machine, same cores.

  JAX_PLATFORMS=cpu python bench/word2vec_vs_gensim.py --seeds 1,2,3

Both train skip-gram with negative sampling (sg=1, hs=0, negative=5, vector_size=100,
window=5, min_count=5, sample=1e-3, epochs=5, alpha 0.025 -> 1e-4; gensim with
workers=2) on the same sentences (bert_jax.word2vec.data.embedded_corpus()), runs
interleaved (ours, gensim, ours, ...) so both see the same background load.

words/s is effective words per second of training, for both: effective words are the
in-vocabulary tokens that survive subsampling (gensim's `trained_word_count`, what its
log calls "effective words"; ours counts the same tokens), divided by the wall time of
training. gensim: `model.train(...)` after `build_vocab`. Ours: the training loop of
`train_and_evaluate` after the vocabulary, the state and the compiled step exist (host
batch pipeline, every device step, the final sync); the XLA compilation of the step
(about 0.5 s) is timed apart and shown as "incl. compile" too. Corpus loading and
vocabulary building are outside both clocks.

Scores: WordSim-353 and SimLex-999 Spearman, Google analogy accuracy (restrict_vocab
300000), all by gensim's own KeyedVectors.evaluate_* (ours on our exported vectors,
loaded into gensim: the same numbers our evaluator logs).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_jax.word2vec import train as task  # noqa: E402  (before jax starts: see below)

# One XLA thread, the other core for the host pipeline (what train_and_evaluate does when
# it starts the backend itself; here the backend must start before anything else).
task.start_cpu_backend_single_threaded()

import numpy as np  # noqa: E402
from gensim.models import KeyedVectors, Word2Vec  # noqa: E402

from bert_jax.word2vec import data as w2v_data  # noqa: E402


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


def run_ours(config, seed: int, workdir: str) -> dict:
  config.seed = seed
  out = task.train_and_evaluate(config, workdir)
  m = out["metrics"]
  kv = KeyedVectors.load_word2vec_format(os.path.join(workdir, "vectors.bin"), binary=True)
  return dict(seconds=m["train_seconds"], words=m["effective_words"],
              words_per_sec=m["words_per_sec"],
              words_per_sec_with_compile=m["words_per_sec_with_compile"], **gensim_scores(kv))


def run_gensim(sentences, seed: int, epochs: int, alpha: float) -> dict:
  model = Word2Vec(sg=1, hs=0, negative=5, vector_size=100, window=5, min_count=5,
                   sample=1e-3, workers=2, seed=seed, alpha=alpha, min_alpha=1e-4)
  model.build_vocab(sentences)
  start = time.time()
  effective, _ = model.train(sentences, total_examples=len(sentences), epochs=epochs)
  seconds = time.time() - start
  return dict(seconds=seconds, words=effective, words_per_sec=effective / seconds,
              words_per_sec_with_compile=effective / seconds, **gensim_scores(model.wv))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--seeds", default="1,2,3")
  parser.add_argument("--epochs", type=int, default=5)
  parser.add_argument("--alpha", type=float, default=0.025)
  args = parser.parse_args()
  config = load_config(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "configs", "word2vec.py"))
  config.train.epochs, config.train.alpha, config.export_format = args.epochs, args.alpha, "binary"
  sentences = [list(s) for s in w2v_data.embedded_corpus()]
  print(f"corpus: {len(sentences)} sentences, {sum(map(len, sentences))} words; "
        f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
  rows = {"ours": [], "gensim": []}
  with tempfile.TemporaryDirectory() as tmp:
    for seed in [int(s) for s in args.seeds.split(",")]:
      rows["ours"].append(run_ours(config, seed, os.path.join(tmp, f"ours{seed}")))
      rows["gensim"].append(run_gensim(sentences, seed, args.epochs, args.alpha))
      for name in ("ours", "gensim"):
        r = rows[name][-1]
        print(f"seed {seed} {name:6s}: {r['words_per_sec']:9,.0f} words/s ({r['words']} words "
              f"in {r['seconds']:.1f}s; incl. compile {r['words_per_sec_with_compile']:,.0f})"
              f" | WS353 {r['wordsim353']:.3f} | SimLex {r['simlex999']:.3f}"
              f" | analogy {r['analogy']:.4f}", flush=True)
  print(f"load after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
  print("| system | words/s | words/s incl. compile | WordSim-353 ρ | SimLex-999 ρ | analogy acc |")
  print("|---|---|---|---|---|---|")
  for name, rs in rows.items():
    mean = {k: np.mean([r[k] for r in rs]) for k in rs[0]}
    print(f"| {name} (mean of {len(rs)}) | {mean['words_per_sec']:,.0f} "
          f"| {mean['words_per_sec_with_compile']:,.0f} | {mean['wordsim353']:.3f} "
          f"| {mean['simlex999']:.3f} | {mean['analogy']:.4f} |")


if __name__ == "__main__":
  main()
