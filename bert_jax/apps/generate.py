"""Text generation from a GPT: one continuation per prompt, printed to stdout.

  python -m bert_jax.generate --checkpoint DIR (--prompt TEXT | --input prompts.txt) \
      [--max_new_tokens 50] [--temperature 1.0] [--top_k 0] [--top_p 1.0] [--seed 0] \
      [--batch_size 16] [--tokenizer PATH] [--matmul_dtype bfloat16]

DIR is one of our `lm` workdirs (checkpoints/ dir or a step dir; its tokenizer.json is
found through the checkpoint's meta) or a Hugging Face GPT-2 directory (config.json +
model.safetensors + vocab.json/merges.txt or tokenizer.json). --tokenizer overrides the
tokenizer (a tokenizer.json, or a directory holding one or vocab.json + merges.txt).
--input: one prompt a line (UTF-8). Sampling is bert_jax/decoding's (KV cache, prompt
prefilled in one call, prompts of different lengths batched): --temperature 0 or
--top_k 1 is greedy; generation of a row stops at <|endoftext|>. Output: for each
prompt, a line `=== prompt i` then the prompt and its continuation.
A prompt longer than the context (the model's positions minus --max_new_tokens) keeps
its last tokens, with a warning. Bad input (an empty prompt, an unknown tokenizer file, a
checkpoint that is not a GPT, bad flags) prints `generate: error: ...` to stderr and
exits with status 2.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

import numpy as np

from bert_jax import cli
from bert_jax.runtime import compile_cache

EOT = "<|endoftext|>"


class InputError(Exception):
  """Bad user input: one line on stderr, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="generate", description=__doc__.split("\n")[0])
  p.add_argument("--checkpoint", required=True, help="our lm workdir or an HF GPT-2 dir")
  src = p.add_mutually_exclusive_group(required=True)
  src.add_argument("--prompt", help="one prompt")
  src.add_argument("--input", help="a UTF-8 file, one prompt a line")
  p.add_argument("--max_new_tokens", type=int, default=50)
  p.add_argument("--temperature", type=float, default=1.0)
  p.add_argument("--top_k", type=int, default=0)
  p.add_argument("--top_p", type=float, default=1.0)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--batch_size", type=int, default=16)
  p.add_argument("--tokenizer", default=None, help="tokenizer.json or a tokenizer dir")
  p.add_argument("--matmul_dtype", choices=("bfloat16", "float32"), default=None,
                 help="matmul operands in this dtype, float32 accumulation (default: the "
                      "checkpoint's); bfloat16 reads half the weight bytes a step")
  compile_cache.add_flag(p)
  return p


def _check_flags(args) -> None:
  if args.max_new_tokens < 1:
    raise InputError(f"--max_new_tokens={args.max_new_tokens} must be at least 1")
  if args.temperature < 0:
    raise InputError(f"--temperature={args.temperature} must be >= 0 (0: greedy)")
  if args.top_k < 0:
    raise InputError(f"--top_k={args.top_k} must be >= 0 (0: off)")
  if not 0 < args.top_p <= 1:
    raise InputError(f"--top_p={args.top_p} must be in (0, 1]")
  if args.batch_size < 1:
    raise InputError(f"--batch_size={args.batch_size} must be at least 1")


def read_prompts(args) -> list[str]:
  if args.prompt is not None:
    if not args.prompt.strip():
      raise InputError("--prompt is empty: give some text to continue")
    return [args.prompt]
  if not os.path.isfile(args.input):
    raise InputError(f"--input {args.input} does not exist or is not a file")
  try:
    with open(args.input, encoding="utf-8-sig") as f:
      lines = f.read().splitlines()
  except UnicodeDecodeError as e:
    raise InputError(f"--input {args.input} is not UTF-8 ({e.reason} at byte {e.start})")
  if not lines:
    raise InputError(f"--input {args.input} has no prompt")
  empty = [i + 1 for i, line in enumerate(lines) if not line.strip()]
  if empty:
    raise InputError(f"--input {args.input}: empty prompt on line(s) {empty[:10]}")
  return lines


def load_model(checkpoint: str, tokenizer_path: Optional[str] = None):
  """(TransformerConfig, params, tokenizers.Tokenizer) of a GPT checkpoint directory."""
  from bert_jax.interop import gpt2  # pylint: disable=g-import-not-at-top
  if not os.path.exists(checkpoint):
    raise InputError(f"--checkpoint {checkpoint} does not exist")
  try:
    if os.path.exists(os.path.join(checkpoint, "config.json")):
      config, params = gpt2.load_gpt2(checkpoint)
      tok_dir = checkpoint
    else:
      from bert_jax.checkpoint import manager as ckpt  # pylint: disable=g-import-not-at-top
      config, params, tok_dir = ckpt.load_params_for_inference(checkpoint)
      if "decoder" not in params or "token_embedder" not in params or not config.pre_ln:
        raise ValueError("it holds no GPT (is it a BERT / fine-tuning checkpoint?)")
      from bert_jax.layers.param_layout import scan_to_unrolled  # pylint: disable=g-import-not-at-top
      params = scan_to_unrolled(params)
      config = config.replace(scan_layers=False)
  except Exception as e:  # pylint: disable=broad-except  (any unreadable checkpoint)
    detail = str(e) if isinstance(e, (OSError, ValueError)) else f"{type(e).__name__}: {e}"
    raise InputError(f"cannot load --checkpoint {checkpoint}: {detail}") from None
  path = tokenizer_path or tok_dir
  if path is None:
    raise InputError(f"--checkpoint {checkpoint} names no tokenizer; pass --tokenizer")
  try:
    tokenizer = gpt2.load_gpt2_tokenizer(path)
  except (OSError, ValueError) as e:
    raise InputError(str(e)) from None
  if tokenizer.get_vocab_size(with_added_tokens=True) > config.vocab_size:
    raise InputError(f"the tokenizer {path} has more tokens "
                     f"({tokenizer.get_vocab_size(with_added_tokens=True)}) than the model "
                     f"({config.vocab_size}): they do not belong together")
  return config, params, tokenizer


def encode_prompts(tokenizer, prompts: list[str], context: int) -> tuple[list[list[int]], int]:
  """Token ids of each prompt, the last `context` kept; returns (ids, number truncated)."""
  ids, truncated = [], 0
  for text in prompts:
    row = tokenizer.encode(text, add_special_tokens=False).ids
    if not row:
      raise InputError(f"prompt {text!r} encodes to no token")
    if len(row) > context:
      row, truncated = row[-context:], truncated + 1
    ids.append(row)
  return ids, truncated


def generate(config, params, token_ids: list[list[int]], *, max_new_tokens: int,
             temperature: float, top_k: int, top_p: float, seed: int, eos_id: Optional[int],
             batch_size: int) -> list[list[int]]:
  """Continuations (new token ids, cut at EOS) of each prompt, batched."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from bert_jax.decoding import gpt_generate  # pylint: disable=g-import-not-at-top
  from bert_jax.decoding import weights as decode_weights  # pylint: disable=g-import-not-at-top
  from bert_jax.models.gpt import GPT  # pylint: disable=g-import-not-at-top
  model = GPT(config.replace(deterministic=True))
  params = decode_weights.cast_kernels(params, config)  # once, not in every batch's call
  width = max(len(r) for r in token_ids)  # one prompt width for every batch: one compile
  out = []
  for start in range(0, len(token_ids), batch_size):
    rows = token_ids[start:start + batch_size]
    n = len(rows)
    rows = rows + [rows[-1]] * (min(batch_size, len(token_ids)) - n)  # fill the last batch
    prompt = np.zeros((len(rows), width), np.int32)
    lengths = np.array([len(r) for r in rows], np.int32)
    for i, r in enumerate(rows):
      prompt[i, :len(r)] = r
    new = gpt_generate(model, params, jnp.asarray(prompt), jnp.asarray(lengths),
                       max_new_tokens=max_new_tokens,
                       rng=jax.random.fold_in(jax.random.key(seed), start),
                       temperature=temperature, top_k=top_k, top_p=top_p, eos_id=eos_id,
                       pad_id=eos_id if eos_id is not None else 0)
    for row in np.asarray(new)[:n].tolist():
      if eos_id is not None and eos_id in row:
        row = row[:row.index(eos_id)]
      out.append(row)
  return out


def _warn(msg: str) -> None:
  print(f"generate: warning: {msg}", file=sys.stderr)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """The CLI; returns the exit status (0 ok, 2 bad input or flags)."""
  args = cli.parse_args(build_parser(), argv)
  if isinstance(args, int):
    return args
  compile_cache.set_compilation_cache(args.compilation_cache,
                                      compile_cache.INFERENCE_MIN_COMPILE_SECS)
  try:
    _check_flags(args)
    prompts = read_prompts(args)
    config, params, tokenizer = load_model(args.checkpoint, args.tokenizer)
    if args.matmul_dtype:
      config = config.replace(matmul_dtype=args.matmul_dtype)
    context = config.max_len - args.max_new_tokens
    if context < 1:
      raise InputError(f"--max_new_tokens={args.max_new_tokens} leaves no room for a prompt "
                       f"in the model's {config.max_len} positions")
    token_ids, truncated = encode_prompts(tokenizer, prompts, context)
  except InputError as e:
    print(f"generate: error: {e}", file=sys.stderr)
    return 2
  if truncated:
    _warn(f"{truncated} prompt(s) longer than {context} tokens (the model's {config.max_len} "
          f"positions minus --max_new_tokens) were left-truncated to their last {context}")
  new = generate(config, params, token_ids, max_new_tokens=args.max_new_tokens,
                 temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                 seed=args.seed, eos_id=tokenizer.token_to_id(EOT),
                 batch_size=args.batch_size)
  for i, (ids, cont) in enumerate(zip(token_ids, new)):
    print(f"=== prompt {i}")
    print(tokenizer.decode(ids + cont))
  return 0


if __name__ == "__main__":
  sys.exit(main())
