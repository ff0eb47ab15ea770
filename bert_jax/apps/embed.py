"""Feature extraction: one vector (or one per token) for each line of a text file.

  python -m bert_jax.embed --checkpoint CKPT --input texts.txt --output vectors.npy \
      [--pooling mean|cls|none] [--layers -1 | -4,-3,-2,-1] [--combine concat|mean] \
      [--batch_size 32] [--max_length 512] [--normalize] [--noprogress]

CKPT is a Hugging Face BERT directory (config.json + model.safetensors + vocab) or one
of our training checkpoints (workdir, checkpoints/ dir or step dir). Line i of the input
(UTF-8, "\\n" or "\\r\\n" line ends) is row i of the output:
  mean / cls  float32 .npy [lines, dim]. `mean` averages the real tokens, [CLS] and
              [SEP] included, exactly as sentence-transformers' mean pooling; `cls` is
              the [CLS] vector as is (no pooler dense/tanh).
  none        .npz with `vectors` float32 [total_tokens, dim], `offsets` int64 [lines+1]
              (line i is vectors[offsets[i]:offsets[i+1]], [CLS] and [SEP] included),
              `token_ids` int32 and `tokens` str [total_tokens] (no pickled objects).
The output is written to exactly the given path, whatever its extension.
--layers indexes the hidden states as python does: -1 the last layer, 0 the embedding
output; several layers are concatenated in the given order (as bert-as-service's
pooling_layer and BERT's feature-based NER), dim = hidden * len(layers), or averaged
with --combine mean. --normalize scales every output vector to unit L2 norm.
Empty (or whitespace-only) lines are embedded as "[CLS] [SEP]", with one warning counting
them, so rows stay aligned; lines over --max_length tokens keep their first
max_length - 1 tokens + [SEP] (one warning counts them). To reproduce a
sentence-transformers model, pass its max_seq_length (all-MiniLM-L6-v2: 256).
Bad input (missing file, not UTF-8, no lines, bad checkpoint, bad flags) prints
`embed: error: ...` to stderr and exits with status 2, never a traceback.

This module reads the lines, checks the flags and writes the file; the vectors come from
bert_jax/inference/encode.py, as those of `bert_jax.load(...).encode`.
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Optional, Sequence

import numpy as np

from bert_jax import cli
from bert_jax.inference import encode
from bert_jax.inference.loader import InputError
from bert_jax.layers.config import TransformerConfig
from bert_jax.runtime import compile_cache
from bert_jax.runtime import paths


def read_lines(path: str) -> list[str]:
  """The lines of a UTF-8 file, without their "\\n" / "\\r\\n" (a BOM is dropped)."""
  where = paths.resolve(path)  # local or gs://
  if not where.is_file():
    raise InputError(f"input file {path} does not exist" if not where.exists()
                     else f"input {path} is not a file")
  data = where.read_bytes()
  try:
    text = data.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise InputError(f"{path} is not UTF-8: byte 0x{data[e.start]:02x} at offset {e.start} "
                     f"(line {line}); convert it, e.g. `iconv -f latin1 -t utf-8`") from None
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()  # the final newline ends the last line, it does not start a new one
  if not lines:
    raise InputError(f"{path} has no lines to embed")
  return [line[:-1] if line.endswith("\r") else line for line in lines]


def _parse_layers(text: str) -> tuple[int, ...]:
  try:
    layers = tuple(int(x) for x in text.split(",") if x.strip())
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
  if not layers:
    raise argparse.ArgumentTypeError("no layer given")
  return layers


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m bert_jax.embed", description=__doc__.split("\n")[0],
      epilog="See the module docstring (bert_jax/apps/embed.py) for the output formats.")
  parser.add_argument("--checkpoint", required=True,
                      help="HF BERT directory or bert_jax training checkpoint")
  parser.add_argument("--input", required=True, help="UTF-8 text file, one text per line")
  parser.add_argument("--output", required=True,
                      help=".npy [lines, dim] for mean/cls; an .npz archive for none")
  parser.add_argument("--pooling", choices=encode.POOLINGS, default="mean",
                      help="mean: average of the real tokens incl. [CLS]/[SEP] "
                           "(sentence-transformers); cls: the [CLS] vector; none: every "
                           "token's vector (.npz: vectors, offsets, token_ids, tokens)")
  parser.add_argument("--layers", type=_parse_layers, default=(-1,),
                      help="hidden states to use, python indices: -1 last layer, 0 "
                           "embeddings; several (e.g. -4,-3,-2,-1) are CONCATENATED in that "
                           "order (dim = hidden x count), or averaged with --combine mean")
  parser.add_argument("--combine", choices=("concat", "mean"), default="concat",
                      help="how several --layers are combined (default concat)")
  parser.add_argument("--batch_size", type=int, default=32,
                      help="forward pass size in texts of 64 tokens: lines are packed "
                           "several to a row, about batch_size * 64 tokens a pass (up to "
                           "1.5x that where it saves empty rows)")
  parser.add_argument("--max_length", type=int, default=None,
                      help="tokens per line incl. [CLS]/[SEP]; longer lines are truncated "
                           "(default: the model's max positions, at most 512)")
  parser.add_argument("--normalize", action="store_true",
                      help="scale each output vector to unit L2 norm")
  parser.add_argument("--noprogress", action="store_true",
                      help="no progress bar (shown on stderr only when it is a terminal)")
  compile_cache.add_flag(parser)
  return parser


def _warn(message: str) -> None:
  print(f"embed: warning: {message}", file=sys.stderr)


def _check_flags(args, config: TransformerConfig) -> int:
  """Validates flags against the model; returns the effective max_length."""
  if paths.resolve(args.output).is_dir():
    raise InputError(f"--output {args.output} is a directory; give a file path")
  clash = cli.overwritten_input(args.output, [("--input", args.input)])
  if clash:
    raise InputError(clash)
  if args.batch_size < 1:
    raise InputError(f"--batch_size must be >= 1, got {args.batch_size}")
  max_length = args.max_length or min(config.max_len, 512)
  if not 2 <= max_length <= config.max_len:
    raise InputError(f"--max_length must be in [2, {config.max_len}] (the model's "
                     f"position table), got {max_length}")
  num_states = config.num_layers + 1
  bad = [i for i in args.layers if not -num_states <= i < num_states]
  if bad:
    raise InputError(f"--layers {bad} out of range: this model has {config.num_layers} "
                     f"layers, so valid indices are {-num_states}..{num_states - 1}")
  return max_length


def _write(path: str, pooling: str, vectors: list[np.ndarray], encoded: encode.Encoded) -> tuple:
  out = paths.resolve(path)  # local or gs:// (np.save/np.savez write to any file object)
  out.parent.mkdir(parents=True, exist_ok=True)
  with out.open("wb") as f:
    if pooling != "none":
      array = np.stack(vectors).astype(np.float32)
      np.save(f, array)
      return array.shape
    offsets = np.cumsum([0] + [len(v) for v in vectors]).astype(np.int64)
    flat = np.concatenate(vectors).astype(np.float32)
    np.savez(f, vectors=flat, offsets=offsets,
             token_ids=np.concatenate(encoded.ids).astype(np.int32),
             tokens=np.array([t for ts in encoded.tokens for t in ts], dtype=str))
    return flat.shape


def _glue_layers(argv: Sequence[str]) -> list[str]:
  """`--layers -4,-3` -> `--layers=-4,-3`: argparse takes "-4,-3" for an option otherwise."""
  out, rest = [], list(argv)
  while rest:
    arg = rest.pop(0)
    if arg == "--layers" and rest and re.fullmatch(r"-\d[\d,\s-]*", rest[0]):
      arg = f"--layers={rest.pop(0)}"
    out.append(arg)
  return out


def main(argv: Optional[Sequence[str]] = None) -> int:
  """The CLI; returns the exit status (0 ok, 2 bad input or flags)."""
  argv = _glue_layers(sys.argv[1:] if argv is None else argv)
  args = cli.parse_args(build_parser(), argv)
  if isinstance(args, int):
    return args
  compile_cache.set_compilation_cache(args.compilation_cache,
                                      compile_cache.INFERENCE_MIN_COMPILE_SECS)
  from bert_jax.checkpoint.pretrained import load_encoder  # pylint: disable=g-import-not-at-top
  try:
    lines = read_lines(args.input)
    try:
      config, params, tokenizer = load_encoder(args.checkpoint)
    except Exception as e:  # pylint: disable=broad-except  (any unreadable checkpoint)
      detail = str(e) if isinstance(e, (OSError, ValueError)) else f"{type(e).__name__}: {e}"
      raise InputError(f"cannot load --checkpoint {args.checkpoint}: {detail}") from None
    if tokenizer is None:
      raise InputError(f"--checkpoint {args.checkpoint} has no vocab.txt / tokenizer.json")
    max_length = _check_flags(args, config)
    encoded = encode.tokenize(tokenizer, lines, max_length)
  except InputError as e:
    print(f"embed: error: {e}", file=sys.stderr)
    return 2
  if encoded.num_empty:
    _warn(f"{encoded.num_empty} empty line(s) embedded as [CLS] [SEP] (rows stay aligned "
          "with input lines)")
  if encoded.num_truncated:
    _warn(f"{encoded.num_truncated} line(s) longer than --max_length={max_length} tokens "
          "were truncated")
  vectors = encode.run_model(config, params, encoded.ids, pooling=args.pooling,
                             layers=args.layers, combine=args.combine,
                             batch_size=args.batch_size, max_length=max_length,
                             progress_bar=not args.noprogress)
  if args.normalize:
    vectors = [encode.normalize(v) for v in vectors]
  try:
    shape = _write(args.output, args.pooling, vectors, encoded)
  except OSError as e:
    print(f"embed: error: cannot write --output {args.output}: {e}", file=sys.stderr)
    return 2
  print(f"embed: wrote {args.pooling} vectors {list(shape)} for {len(lines)} lines to "
        f"{args.output}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
