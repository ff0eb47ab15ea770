"""Our seq2seq decoding (beam 4 and greedy) against transformers' MarianMTModel.generate.

  .venv/bin/python bench/inference/decode.py --ref_python .venv-ref/bin/python   # both sides, one run
  .venv/bin/python bench/inference/decode.py --side ours --scan                   # ours only

Ours runs in this process (the project venv); the reference runs in a subprocess under
--ref_python (the .venv-ref of requirements-ref.txt: torch CPU + transformers 4.57.6), so
the two are measured in one run on the same machine, one after the other, never together.

Same model on both sides, random weights: 6 + 6 layers, d_model 512, 8 heads, FFN 2048
(ReLU), vocabulary 8000 shared by source, target and the tied output projection, sinusoidal
positions, embeddings scaled by sqrt(d) (Marian = the Vaswani base layout, post-LN), float32.
Batch 32 sources of exactly --src_len tokens (no padding), and every hypothesis runs for
exactly --new_tokens tokens: EOS is suppressed on both sides (theirs: min_new_tokens =
max_new_tokens; ours: no eos_id), so both do the same number of decoder steps. Beam search
keeps 4 beams with length penalty 0.6 on both sides.

Reported: sentences/s and generated tokens/s (batch x new tokens of the returned best
hypotheses, excluding BOS), best of --reps timed calls after one warm-up call (ours: the
warm-up includes the XLA compile, reported separately).

The result (--side both only): bench/results/cpu_vs_pytorch-decode.json (bench/results_io.py;
each side's tokens/s per search, ours / theirs, no goal), RESULTS.md's figures from

  .venv/bin/python bench/inference/decode.py --ref_python .venv-ref/bin/python --bf16

--results-dir DIR writes it there instead; --no-result only prints.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import results_io  # noqa: E402  pylint: disable=wrong-import-position  (standard library)

DIMS = dict(vocab=8000, d_model=512, layers=6, heads=8, ffn=2048)
PAD, BOS, EOS = 0, 1, 2


def _sources(batch: int, src_len: int, vocab: int, seed: int = 0):
  import numpy as np
  return np.random.default_rng(seed).integers(3, vocab, size=(batch, src_len)).astype(np.int32)


def _timed(fn, reps: int):
  """(first call seconds, timed repeat seconds, the last call's result)."""
  start = time.perf_counter()
  result = fn()
  first = time.perf_counter() - start
  times = []
  for _ in range(reps):
    start = time.perf_counter()
    result = fn()
    times.append(time.perf_counter() - start)
  return first, times, result


# ------------------------------------------------------------------------------ ours
def build_ours(args):
  """(model, params, src [batch, src_len], mask) of the benchmarked Transformer."""
  sys.path.insert(0, ROOT)
  import jax
  import jax.numpy as jnp

  from bert_jax.layers.config import TransformerConfig
  from bert_jax.models.seq2seq import Transformer

  cfg = TransformerConfig(
      vocab_size=DIMS["vocab"], hidden_size=DIMS["d_model"], num_layers=DIMS["layers"],
      num_decoder_layers=DIMS["layers"], num_heads=DIMS["heads"], mlp_dim=DIMS["ffn"],
      max_len=max(args.src_len, args.new_tokens) + 1, type_vocab_size=0, activation="relu",
      position="sinusoidal", scale_embeddings=True, init="xavier", layer_norm_eps=1e-5,
      dropout_rate=0.0, attention_dropout_rate=0.0, deterministic=True,
      scan_layers=args.scan, matmul_dtype=getattr(args, "matmul_dtype", None))
  model = Transformer(cfg)
  src = jnp.asarray(_sources(args.batch, args.src_len, DIMS["vocab"]))
  mask = jnp.ones(src.shape, bool)
  params = jax.jit(lambda: model.init(jax.random.key(0), src[:, :2], src[:, :2])["params"])()
  return model, params, src, mask


def run_ours(args) -> dict:
  import jax

  from bert_jax import decoding
  from bert_jax.decoding import weights as decode_weights
  model, params, src, mask = build_ours(args)
  models = {"": (model, params)}
  if args.bf16:  # the same weights, matmul operands in bfloat16 (float32 accumulation)
    bf16 = model.clone(config=model.config.replace(matmul_dtype="bfloat16"))
    models["bf16"] = bf16, decode_weights.cast_kernels(params, bf16.config)  # once, as translate does
  out = {}
  for name, kw, tag in [(n, k, t) for n, k in (
      ("beam", dict(method="beam", beam_size=args.beam)), ("greedy", dict(method="greedy")))
                        for t in models]:
    model, params = models[tag]
    def call(kw=kw, model=model, params=params):
      seqs, _ = decoding.seq2seq_generate(model, params, src, mask, max_len=args.new_tokens,
                                          bos_id=BOS, eos_id=None, alpha=0.6,
                                          extra_len=None, **kw)
      return jax.block_until_ready(seqs)
    first, times, seqs = _timed(call, args.reps)
    assert seqs.shape == (args.batch, args.new_tokens) and int((seqs == PAD).sum()) == 0
    out[name + tag] = dict(first=first, times=times)
  return out


# ------------------------------------------------------------------------- reference
def run_ref(args) -> dict:
  import torch
  from transformers import MarianConfig, MarianMTModel

  torch.manual_seed(0)
  torch.set_num_threads(args.threads or os.cpu_count())
  config = MarianConfig(
      vocab_size=DIMS["vocab"], d_model=DIMS["d_model"], encoder_layers=DIMS["layers"],
      decoder_layers=DIMS["layers"], encoder_attention_heads=DIMS["heads"],
      decoder_attention_heads=DIMS["heads"], encoder_ffn_dim=DIMS["ffn"],
      decoder_ffn_dim=DIMS["ffn"], activation_function="relu",
      max_position_embeddings=max(args.src_len, args.new_tokens) + 1, scale_embedding=True,
      share_encoder_decoder_embeddings=True, tie_word_embeddings=True, dropout=0.0,
      attention_dropout=0.0, activation_dropout=0.0, pad_token_id=PAD, eos_token_id=EOS,
      decoder_start_token_id=BOS, forced_eos_token_id=None, bad_words_ids=None)
  model = MarianMTModel(config).eval()
  src = torch.from_numpy(_sources(args.batch, args.src_len, DIMS["vocab"])).long()
  mask = torch.ones_like(src)
  out = {}
  for name, beams in (("beam", args.beam), ("greedy", 1)):
    def call(beams=beams):
      with torch.inference_mode():
        return model.generate(input_ids=src, attention_mask=mask, num_beams=beams,
                              do_sample=False, max_new_tokens=args.new_tokens,
                              min_new_tokens=args.new_tokens, length_penalty=0.6,
                              early_stopping=False)
    first, times, seqs = _timed(call, args.reps)
    # generate returns the decoder start token first, then the new tokens.
    assert tuple(seqs.shape) == (args.batch, args.new_tokens + 1), seqs.shape
    out[name] = dict(first=first, times=times)
  out["torch"] = torch.__version__
  import transformers
  out["transformers"] = transformers.__version__
  return out


def _row(side: str, name: str, r: dict, args) -> dict:
  best = min(r["times"])
  return dict(side=side, search=name, sents=args.batch / best,
              toks=args.batch * args.new_tokens / best, best=best, first=r["first"],
              reps=len(r["times"]))


def table_rows(ours: dict, ref: dict, args) -> list:
  """The printed table: a row per side and search, then ours / theirs tokens/s (a row
  with `ratio`) after each of ours."""
  rows = []
  for name in ("beam", "greedy"):
    theirs = _row("MarianMT (PyTorch)", name, ref[name], args)
    for tag, side in (("", "ours (JAX)"), ("bf16", "ours, bf16 matmuls")):
      if name + tag in ours:
        row = _row(side, name, ours[name + tag], args)
        rows += [row] + ([theirs] if not tag else [])
        rows.append(dict(side=side, search=name, ratio=row["toks"] / theirs["toks"]))
  return rows


def decode_result(rows: list, ref: dict, args, load_before: float) -> dict:
  """bench/results/cpu_vs_pytorch-decode.json: every table row a figure, no goal."""
  search = lambda n: f"beam {args.beam}" if n == "beam" else n
  figures, ratio = [], {}
  for r in rows:
    if "ratio" in r:
      ratio[(r["side"], r["search"])] = r["ratio"]
      figures.append(results_io.figure(
          f"{r['side']} / MarianMT, {search(r['search'])}", round(r["ratio"], 2), "x",
          "generated tokens/s"))
    else:
      figures.append(results_io.figure(
          f"{r['side']}, {search(r['search'])}", round(r["toks"], 1), "tokens/s",
          f"{r['sents']:.2f} sentences/s; best {r['best']:.3f} s of {r['reps']}, first "
          f"call {r['first']:.2f} s" + (" (compiles incl.)" if "ours" in r["side"] else "")))
  f32 = [f"{search(n)} {ratio[('ours (JAX)', n)]:.2f}x" for n in ("beam", "greedy")]
  head = "seq2seq " + ", ".join(f32) + " MarianMT tokens/s"
  if ("ours, bf16 matmuls", "beam") in ratio:
    head += "; bf16 matmuls " + ", ".join(
        f"{search(n)} {ratio[('ours, bf16 matmuls', n)]:.2f}x" for n in ("beam", "greedy"))
  return results_io.result(
      "cpu_vs_pytorch", "Seq2seq decoding vs transformers (CPU)", figures,
      "transformers' MarianMTModel.generate, same dimensions, random weights", head,
      case="decode", load_before=load_before,
      notes="data, no goal: CPU speed against PyTorch is no longer a project goal. "
            f"Batch {args.batch}, source {args.src_len} tokens, {args.new_tokens} new "
            f"tokens, no EOS; 6 + 6 layers, d_model 512, vocabulary 8000, float32; "
            f"transformers {ref['transformers']}, torch {ref['torch']}.")


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--side", choices=["both", "ours", "ref"], default="both")
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--src_len", type=int, default=32)
  p.add_argument("--new_tokens", type=int, default=32)
  p.add_argument("--beam", type=int, default=4)
  p.add_argument("--reps", type=int, default=3)
  p.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
  p.add_argument("--scan", action="store_true", help="ours with scan over layers")
  p.add_argument("--bf16", action="store_true",
                 help="also ours with bfloat16 matmul operands (matmul_dtype)")
  p.add_argument("--ref_python", default=os.path.join(ROOT, ".venv-ref", "bin", "python"))
  p.add_argument("--results-dir", default=results_io.RESULTS_DIR,
                 help="where the result JSON goes (default bench/results)")
  p.add_argument("--no-result", action="store_true", help="print only")
  args = p.parse_args(argv)
  if args.side == "ref":
    print(json.dumps(run_ref(args)))
    return
  import bench_util  # pylint: disable=g-import-not-at-top
  bench_util.header("bench/inference/decode.py")
  load_before = results_io.load()
  ours = run_ours(args)
  if args.side == "ours":
    print(json.dumps(ours))
    return
  if not os.path.exists(args.ref_python):
    sys.exit(f"--ref_python {args.ref_python} does not exist (see requirements-ref.txt).")
  cmd = [args.ref_python, os.path.abspath(__file__), "--side", "ref"] + [
      f"--{k}={getattr(args, k)}" for k in ("batch", "src_len", "new_tokens", "beam", "reps",
                                             "threads")]
  ref = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True)
                   .stdout.strip().splitlines()[-1])
  print(f"batch {args.batch}, source {args.src_len} tokens, {args.new_tokens} new tokens, "
        f"beam {args.beam}; dims {DIMS}; transformers {ref['transformers']}, "
        f"torch {ref['torch']}")
  print("| side               | search | sent/s   | tokens/s  | best s  | first s |")
  print("|--------------------|--------|----------|-----------|---------|---------|")
  rows = table_rows(ours, ref, args)
  for r in rows:
    if "ratio" in r:
      print(f"{r['search']}: {r['side']} / theirs tokens/s = {r['ratio']:.2f}x")
    else:
      print(f"| {r['side']:<18} | {r['search']:<6} | {r['sents']:8.2f} | {r['toks']:9.1f} | "
            f"{r['best']:7.3f} | {r['first']:7.2f} |")
  print(bench_util.load_line("end"))
  res = decode_result(rows, ref, args, load_before)
  print(res["title"], "-", res["headline"])
  if not args.no_result:
    print("wrote", results_io.write(res, args.results_dir))

if __name__ == "__main__":
  main()
