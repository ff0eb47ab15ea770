"""Pictures of what the models learned (matplotlib PNGs + printed text).

  python -m bert_jax.visualize attention --checkpoint DIR --text "..." [--text_b "..."]
      [--layer L] [--head H | --mean] [--attention self|cross|encoder] [--output a.png]
      [--html heads.html]
  python -m bert_jax.visualize positions [--kind sinusoidal|learned|rotary|relative]
      [--d_model 128] [--length 50] [--checkpoint DIR] [--output p.png]
  python -m bert_jax.visualize contextual --checkpoint DIR --word bank
      --sentence "..." --sentence "..." [--vectors w2v.bin] [--output c.png]
  python -m bert_jax.visualize curves --workdir W [--workdir W2 ...]
      [--metrics loss,mlm_accuracy] [--output curves.png]
  python -m bert_jax.visualize words --vectors V --words king,queen,man,woman [--output w.png]

DIR is a Hugging Face BERT directory (e.g. the packaged all-MiniLM-L6-v2) or one of our
workdirs (BERT; the encoder-decoder and GPT for attention). Layers and heads count from 0.
Bad input prints one line `visualize: error: ...` and exits with status 2.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from bert_jax import cli


def _int(text: str) -> int:
  try:
    return int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="python -m bert_jax.visualize",
                                   description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)

  p = sub.add_parser("attention", help="attention table + heatmaps (+ HTML head view)")
  p.add_argument("--checkpoint", required=True)
  p.add_argument("--text", required=True, help="the sentence (encoder-decoder: the source)")
  p.add_argument("--text_b", help="BERT: the second segment; encoder-decoder: the target")
  p.add_argument("--layer", type=_int, help="0-based; default: all layers")
  p.add_argument("--head", type=_int, help="0-based; default: all heads")
  p.add_argument("--mean", action="store_true", help="average the heads")
  p.add_argument("--attention", choices=("self", "cross", "encoder"),
                 help="encoder-decoder: cross (default), decoder self, or encoder")
  p.add_argument("--output", default="attention.png")
  p.add_argument("--html", help="also write the self-contained head view here")

  p = sub.add_parser("positions", help="positional encodings as heatmaps")
  p.add_argument("--kind", default="sinusoidal",
                 choices=("sinusoidal", "learned", "rotary", "relative"))
  p.add_argument("--d_model", type=_int, default=128)
  p.add_argument("--length", type=_int, default=50)
  p.add_argument("--checkpoint", help="for learned tables / learned relative biases")
  p.add_argument("--output", default="positions.png")
  p.add_argument("--save_matrix", help="also save the drawn matrix as .npy")

  p = sub.add_parser("contextual", help="one word's contextual vectors across sentences")
  p.add_argument("--checkpoint", required=True)
  p.add_argument("--word", required=True)
  p.add_argument("--sentence", action="append", default=[], required=True)
  p.add_argument("--layer", type=_int, default=-1,
                 help="hidden state: -1 the last layer, 0 the embeddings")
  p.add_argument("--vectors", help="word2vec vectors.bin / vectors.txt to compare with")
  p.add_argument("--output", default="contextual.png")

  p = sub.add_parser("curves", help="learning curves from metrics.jsonl")
  p.add_argument("--workdir", action="append", required=True)
  p.add_argument("--metrics", default="loss,mlm_accuracy")
  p.add_argument("--output", default="curves.png")

  p = sub.add_parser("words", help="word2vec vectors in 2-D (PCA)")
  p.add_argument("--vectors", required=True)
  p.add_argument("--words", required=True, help="comma-separated")
  p.add_argument("--output", default="words.png")
  return parser


def _glue_negative(argv: Sequence[str]) -> list[str]:
  """`--layer -1` -> `--layer=-1`: argparse would take "-1" for an option otherwise."""
  out, rest = [], list(argv)
  while rest:
    arg = rest.pop(0)
    if arg in ("--layer", "--head") and rest and rest[0].lstrip("-").isdigit():
      arg = f"{arg}={rest.pop(0)}"
    out.append(arg)
  return out


def main(argv: Optional[Sequence[str]] = None) -> int:
  """The CLI; returns the exit status (0 ok, 2 bad input or flags)."""
  argv = _glue_negative(sys.argv[1:] if argv is None else argv)
  args = cli.parse_args(build_parser(), argv)
  if isinstance(args, int):
    return args
  # pylint: disable=g-import-not-at-top
  from bert_jax.inference import loader
  inputs = [("--vectors", getattr(args, "vectors", None))] + [
      ("metrics of --workdir", os.path.join(w, "metrics.jsonl"))
      for w in getattr(args, "workdir", None) or ()]
  for flag in ("output", "html", "save_matrix"):
    clash = cli.overwritten_input(getattr(args, flag, None), inputs, f"--{flag}")
    if clash:
      print(f"visualize: error: {clash}", file=sys.stderr)
      return 2
  try:
    if args.command == "attention":
      from bert_jax.visualize import attention_picture
      return attention_picture.run(args, loader.load(args.checkpoint))
    if args.command == "positions":
      from bert_jax.visualize import positions
      model = loader.load(args.checkpoint) if args.checkpoint else None
      return positions.run(args, model)
    if args.command == "contextual":
      from bert_jax.visualize import contextual
      return contextual.run(args, loader.load(args.checkpoint))
    if args.command == "curves":
      from bert_jax.visualize import curves
      return curves.run(args)
    from bert_jax.visualize import words
    return words.run(args)
  except loader.InputError as e:
    print(f"visualize: error: {e}", file=sys.stderr)
    return 2
  except OSError as e:  # e.g. an unwritable --output
    print(f"visualize: error: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
