"""Fill-mask: the top-k tokens (with probabilities) the MLM head predicts for each [MASK].

  python -m bert_jax.fill_mask --checkpoint DIR --text "the capital of france is [MASK] ." \
      [--text "..." ...] [--top_k 5]

DIR is one of our pretraining workdirs or a Hugging Face BERT directory with the MLM head
(BertForPreTraining / BertForMaskedLM). Each text is "[CLS] text [SEP]" unless it starts
with [CLS]. For a workdir, the held-out MLM accuracy of its last evaluation
(metrics.jsonl `eval/mlm_accuracy`) is printed too, so the numbers sit next to examples.
Bad input (no [MASK], a checkpoint without an MLM head, ...) prints one line
`fill_mask: error: ...` and exits with status 2.

The predictions are bert_jax/inference/fill_mask.py's, as those of
`bert_jax.load(...).fill_mask`; this module parses the flags and prints them.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from bert_jax import cli
from bert_jax.inference import fill_mask
from bert_jax.inference import loader
from bert_jax.inference.loader import InputError
from bert_jax.runtime import compile_cache
from bert_jax.runtime import jsonl


def check_top_k(top_k: int) -> None:
  if top_k < 1:
    raise InputError(f"--top_k must be >= 1, got {top_k}")


def mask_lines(masks: list[list[tuple[str, float]]], suffix: str = "") -> list[str]:
  """fill()'s result as printed: one line per [MASK], `  [MASK]<suffix>: tok p  tok p`."""
  lines = []
  for k, candidates in enumerate(masks):
    label = "[MASK]" if len(masks) == 1 else f"[MASK] {k + 1}"
    lines.append(f"  {label}{suffix}: " + "  ".join(f"{t} {p:.3f}" for t, p in candidates))
  return lines


def held_out_accuracy(path: str) -> Optional[tuple[int, float]]:
  """(step, eval/mlm_accuracy) of the last evaluation logged in path/metrics.jsonl."""
  metrics = os.path.join(path, "metrics.jsonl")
  if not os.path.isfile(metrics):
    return None
  last = None
  for row in jsonl.rows(metrics):
    if "eval/mlm_accuracy" in row:
      last = (int(row["step"]), float(row["eval/mlm_accuracy"]))
  return last


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="python -m bert_jax.fill_mask",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--checkpoint", required=True,
                      help="our pretraining workdir or an HF BERT directory with the MLM head")
  parser.add_argument("--text", action="append", required=True,
                      help="a text with one or more [MASK] (repeatable)")
  parser.add_argument("--top_k", type=int, default=5)
  compile_cache.add_flag(parser)
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = cli.parse_args(build_parser(), argv)
  if isinstance(args, int):
    return args
  compile_cache.set_compilation_cache(args.compilation_cache,
                                      compile_cache.INFERENCE_MIN_COMPILE_SECS)
  try:
    check_top_k(args.top_k)
    model = loader.load(args.checkpoint)
    fill_mask.check_mlm_head(model)
    results = fill_mask.fill_many(model, args.text, args.top_k)
  except InputError as e:
    print(f"fill_mask: error: {e}", file=sys.stderr)
    return 2
  for text, masks in zip(args.text, results):
    print("\n".join([text] + mask_lines(masks)))
  accuracy = held_out_accuracy(args.checkpoint) if os.path.isdir(args.checkpoint) else None
  if accuracy:
    print(f"held-out MLM accuracy: {accuracy[1]:.4f} (step {accuracy[0]}, "
          f"{args.checkpoint}/metrics.jsonl)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
