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
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import sys
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax import cli
from bert_jax.runtime import compile_cache
from bert_jax.runtime import paths
from bert_jax.data.packing import first_fit_decreasing
from bert_jax.layers.config import TransformerConfig
from bert_jax.models.bert import BertModel

POOLINGS = ("mean", "cls", "none")
# Packed forward passes (run_model, plan_passes): rows of ROW_LENGTH tokens (longer
# texts: a multiple of LENGTH_BUCKET); a pass holds about batch_size * TOKENS_PER_TEXT.
ROW_LENGTH = 96
LENGTH_BUCKET = 32
TOKENS_PER_TEXT = 64


class InputError(Exception):
  """Bad user input: reported as one line on stderr, exit status 2."""


# ---------------------------------------------------------------------------- input
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


@dataclasses.dataclass
class Encoded:
  ids: list[np.ndarray]       # per line: [CLS] tokens [SEP], int32
  tokens: list[list[str]]
  num_truncated: int
  num_empty: int


def tokenize(tokenizer, texts: Sequence[str], max_length: int) -> Encoded:
  """[CLS] text [SEP] per line, truncated to max_length tokens (the [SEP] is kept)."""
  cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
  if cls_id is None or sep_id is None:
    raise InputError("the checkpoint's vocabulary has no [CLS] / [SEP] token")
  ids, tokens, truncated, empty = [], [], 0, 0
  for enc in tokenizer.encode_batch(list(texts), add_special_tokens=False):
    body_ids, body_tokens = enc.ids, enc.tokens
    empty += not body_ids
    if len(body_ids) > max_length - 2:
      truncated += 1
      body_ids, body_tokens = body_ids[:max_length - 2], body_tokens[:max_length - 2]
    ids.append(np.array([cls_id, *body_ids, sep_id], np.int32))
    tokens.append(["[CLS]", *body_tokens, "[SEP]"])
  return Encoded(ids, tokens, truncated, empty)


# ---------------------------------------------------------------------------- model
@functools.partial(jax.jit, static_argnames=("config", "layers", "combine"))
def _forward(params, ids, positions, segments, *, config: TransformerConfig,
             layers: tuple[int, ...], combine: str):
  """Packed rows -> token vectors. ids, positions, segments [rows, len]: several texts
  per row, each with positions from 0 and its own segment id (1, 2, ...; 0 = padding),
  attending only within itself. Returns [rows, len, dim] float32."""
  want_hidden = layers != (-1,)
  out = BertModel(config, add_pooler=False).apply(
      {"params": params}, ids, (segments > 0).astype(jnp.int32), positions=positions,
      packed_segment_ids=segments, output_hidden_states=want_hidden)
  if want_hidden:
    picked = [out["hidden_states"][i] for i in layers]     # each [rows, len, hidden]
    x = (jnp.concatenate(picked, axis=-1) if combine == "concat"
         else jnp.mean(jnp.stack(picked), axis=0))
  else:
    x = out["sequence_output"]
  return x.astype(jnp.float32)                             # [rows, len, dim]


def pack(lengths: Sequence[int], row_length: int, free: np.ndarray | None = None) -> np.ndarray:
  """First-fit decreasing: [texts] row index of each text, so that the lengths in a row
  sum to at most row_length (each length must be <= row_length). Rows are numbered in
  the order they are opened; the longest texts open the first rows.

  free: rows already open, their free tokens (updated in place): texts go only into
  them, and one that fits none gets -1.
  """
  return first_fit_decreasing(lengths, row_length, free=free)


@dataclasses.dataclass
class PackPlan:
  """One shape of packed forward passes: `passes` passes of `rows` rows of `row_length`
  tokens. Text `texts[k]` goes into row `row_of[k]` (numbered across the passes: row r
  is row r % rows of pass r // rows), after the texts placed there before it."""
  texts: np.ndarray
  row_of: np.ndarray
  row_length: int
  rows: int
  passes: int


def plan_passes(lengths: Sequence[int], batch_size: int) -> list[PackPlan]:
  """How texts of these token lengths run: at most two shapes, so at most two compiles.

  Texts up to ROW_LENGTH tokens share rows of ROW_LENGTH (attention over a row grows
  with its length: 96 tokens ran 7% faster than 128 and 1.5x faster than 256 here for
  sentences); longer ones get rows as long as the longest of them, rounded up to
  LENGTH_BUCKET. A pass holds about batch_size * TOKENS_PER_TEXT tokens, and the rows
  spread evenly over the passes, so every pass of a class has one shape, its rows
  rounded up by `rows_a_pass`: at most two compiles a call, and across calls one per
  (row length, rows a pass) of a fixed set. Positions that shape computes anyway are
  not left empty: short texts fill what the long rows leave (their free tokens and the
  rounding's empty rows), longest first, and the passes count is the one near the
  target whose rounding leaves the fewest empty rows (`_pass_shape`).
  """
  lengths = np.asarray(lengths, np.int64)
  short = np.flatnonzero(lengths <= ROW_LENGTH)
  short = short[np.argsort(-lengths[short], kind="stable")]   # first-fit decreasing order
  plans = []
  long = np.flatnonzero(lengths > ROW_LENGTH)
  if long.size:
    row_length = -(-int(lengths[long].max()) // LENGTH_BUCKET) * LENGTH_BUCKET
    long = long[np.argsort(-lengths[long], kind="stable")]
    row_of = pack(lengths[long], row_length)       # in long's order: already decreasing
    # The rounding's empty rows are not wasted while short texts can fill them.
    rows, passes = _pass_shape(int(row_of.max()) + 1, _target_rows(batch_size, row_length),
                               fillable=lengths[short].sum() / row_length)
    free = np.full(rows * passes, row_length, np.int64)
    np.subtract.at(free, row_of, lengths[long])
    filler = pack(lengths[short], row_length, free)           # -1: fits in no long row
    taken = filler >= 0
    plans.append(PackPlan(np.concatenate([long, short[taken]]),
                          np.concatenate([row_of, filler[taken]]), row_length, rows, passes))
    short = short[~taken]
  if short.size:
    row_of = pack(lengths[short], ROW_LENGTH)
    rows, passes = _pass_shape(int(row_of.max()) + 1, _target_rows(batch_size, ROW_LENGTH))
    plans.insert(0, PackPlan(short, row_of, ROW_LENGTH, rows, passes))
  return plans


def _target_rows(batch_size: int, row_length: int) -> int:
  """Rows of row_length in a pass of about batch_size * TOKENS_PER_TEXT tokens."""
  return max(1, batch_size * TOKENS_PER_TEXT // row_length)


def _pass_shape(rows_needed: int, target: int, fillable: float = 0.0) -> tuple[int, int]:
  """(rows a pass, passes) for rows_needed rows at about target rows a pass.

  ceil(rows_needed / target) passes, or up to two more, or one fewer while its passes
  stay within 1.5x the target, whichever leaves the fewest rows empty once a pass's rows
  are rounded up by rows_a_pass and `fillable` rows' worth of other texts have filled
  what they can (ties: the target's count). E.g. 168 rows at 42 a pass: 4 passes of 48
  compute 24 empty rows, 3 of 56 none.
  """
  first = -(-rows_needed // target)
  best = None
  for p in range(max(1, first - 1), first + 3):
    per_pass = rows_a_pass(-(-rows_needed // p))
    if p < first and per_pass > 1.5 * target:
      continue
    passes = -(-rows_needed // per_pass)                      # no empty pass
    key = (max(0.0, per_pass * passes - rows_needed - fillable), abs(p - first))
    if best is None or key < best[0]:
      best = (key, per_pass, passes)
  return best[1], best[2]


def rows_a_pass(needed: int) -> int:
  """The rows of a pass that needs `needed`: 1, 2 or 4, else a multiple of 8.

  So the compiled shapes come from a small fixed set whatever the number of texts (a
  new input size does not recompile unless its rows cross into the next step), and a
  pass carries at most 7 rows of padding.
  """
  return 1 << max(0, needed - 1).bit_length() if needed <= 4 else -(-needed // 8) * 8


def run_model(config: TransformerConfig, params, ids: Sequence[np.ndarray], *,
              pooling: str = "mean", layers: tuple[int, ...] = (-1,), combine: str = "concat",
              batch_size: int = 32, max_length: int = 512,
              progress_bar: bool = False) -> list[np.ndarray]:
  """Per line, in input order: [dim] (mean / cls) or [len_i, dim] (none), float32.

  Texts are packed into rows (`pack`, `plan_passes`): every text keeps its own positions
  and attends only to itself, so its vectors are those of a forward pass of it alone (to
  float rounding), while padding is a few percent of the tokens instead of up to half of
  them with one text a row padded to a bucketed length (on 2,000 corpus sentences: 61k
  tokens run instead of 101k). An input runs as passes of at most two shapes.
  progress_bar: a tqdm bar of passes on stderr (bert_jax/runtime/progress.py).
  """
  from bert_jax.runtime import progress  # pylint: disable=g-import-not-at-top
  del max_length  # the caller truncated the texts; a row may hold more tokens than that
  if pooling not in POOLINGS:
    raise ValueError(f"pooling={pooling!r}; expected one of {POOLINGS}")
  if not ids:
    return []
  # Once on the device, not with every batch; the pooler is not used.
  params = jax.device_put({k: params[k] for k in ("embeddings", "encoder")})
  config = config.replace(deterministic=True)
  lengths = np.array([len(x) for x in ids], np.int64)
  plans = plan_passes(lengths, batch_size)
  results: list[Optional[np.ndarray]] = [None] * len(ids)
  bar = progress.bar(total=sum(p.passes for p in plans), desc="embed", unit="pass",
                     show=progress_bar)
  for plan in plans:
    members = [[] for _ in range(plan.passes * plan.rows)]   # text indices of each row
    for i, r in zip(plan.texts, plan.row_of):
      members[r].append(i)
    for p in range(plan.passes):
      rows = members[p * plan.rows:(p + 1) * plan.rows]
      tokens = np.zeros((plan.rows, plan.row_length), np.int32)
      positions = np.zeros_like(tokens)
      segments = np.zeros_like(tokens)
      spans = []                                     # (text, row, first token)
      for r, row in enumerate(rows):
        at = 0
        for seg, i in enumerate(row, start=1):
          n = lengths[i]
          tokens[r, at:at + n], positions[r, at:at + n], segments[r, at:at + n] = (
              ids[i], np.arange(n), seg)
          spans.append((i, r, at))
          at += n
      # Full float32 matmuls even where the platform default is TF32 / bf16 passes.
      with jax.default_matmul_precision("float32"):
        out = np.asarray(_forward(params, tokens, positions, segments, config=config,
                                  layers=layers, combine=combine))   # [rows, len, dim]
      for i, r, at in spans:
        x = out[r, at:at + lengths[i]]                                # [len_i, dim]
        # sentence-transformers' mean: sum(x * mask) / sum(mask) over the real tokens
        results[i] = (x.copy() if pooling == "none" else x[0].copy() if pooling == "cls"
                      else x.mean(axis=0, dtype=np.float32))
      bar.update(1)
  bar.close()
  return results


def normalize(x: np.ndarray) -> np.ndarray:
  """Unit L2 norm along the last axis (torch.nn.functional.normalize, eps 1e-12)."""
  return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


# ---------------------------------------------------------------------------- CLI
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
  parser.add_argument("--pooling", choices=POOLINGS, default="mean",
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


def _write(path: str, pooling: str, vectors: list[np.ndarray], encoded: Encoded) -> tuple:
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
    encoded = tokenize(tokenizer, lines, max_length)
  except InputError as e:
    print(f"embed: error: {e}", file=sys.stderr)
    return 2
  if encoded.num_empty:
    _warn(f"{encoded.num_empty} empty line(s) embedded as [CLS] [SEP] (rows stay aligned "
          "with input lines)")
  if encoded.num_truncated:
    _warn(f"{encoded.num_truncated} line(s) longer than --max_length={max_length} tokens "
          "were truncated")
  vectors = run_model(config, params, encoded.ids, pooling=args.pooling, layers=args.layers,
                      combine=args.combine, batch_size=args.batch_size, max_length=max_length,
                      progress_bar=not args.noprogress)
  if args.normalize:
    vectors = [normalize(v) for v in vectors]
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
