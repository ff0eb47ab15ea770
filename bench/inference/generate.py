"""Generation speed: our GPT (bert_jax.decoding, jit + KV cache) vs transformers' PyTorch
GPT2LMHeadModel.generate, same dimensions, random weights, greedy, on this CPU.

  /work/main/.venv/bin/python bench/inference/generate.py [--dims small|tiny] [--ref_python PY]

One script runs both sides: ours in this process, theirs in a subprocess of the reference
venv (torch + transformers; default /work/main/.venv-ref/bin/python, or $REF_PYTHON).
Reports generated tokens/s at batch 1 and 16 (prompt 32, 128 new tokens, no EOS on either
side) and our time per new token at positions 32 / 512 / 990 in one cache of all 1,024 slots:
with the cache a step costs the same wherever it is (no re-encoding of the prefix).
Timings exclude compilation (ours) and take the best of --repeats runs (both sides).

The result (--side both only): bench/results/cpu_vs_pytorch-generate.json
(bench/results_io.py; tokens/s of both sides and ours / theirs per batch, our ms per token
at each position, no goal), RESULTS.md's figures from

  .venv/bin/python bench/inference/generate.py --dims small --bf16

--results-dir DIR writes it there instead; --no-result only prints.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

DIMS = {  # GPT-2 124M, and a small model for a quick check
    "small": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12),
    "tiny": dict(vocab_size=4096, n_positions=1024, n_embd=128, n_layer=4, n_head=4),
}
PROMPT, NEW = 32, 128


def _note(*args) -> None:
  print("[bench/generate]", *args, file=sys.stderr, flush=True)  # partial results as they come


def _best(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return min(times)

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)
import results_io  # noqa: E402  pylint: disable=wrong-import-position  (standard library)


# ----------------------------------------------------------------------------- ours
def ours(dims: dict, batches, repeats: int, bf16: bool = False) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_jax.decoding import gpt_generate  # pylint: disable=g-import-not-at-top
  from bert_jax.models.gpt import GPT  # pylint: disable=g-import-not-at-top
  from bert_jax.models.variants import get_model_config  # pylint: disable=g-import-not-at-top
  cfg = get_model_config("gpt/small", vocab_size=dims["vocab_size"], max_len=dims["n_positions"],
                         hidden_size=dims["n_embd"], num_layers=dims["n_layer"],
                         num_heads=dims["n_head"], deterministic=True)
  model = GPT(cfg)
  params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
  rng = np.random.default_rng(0)

  def run(batch, width, new, model=model, params=params):
    prompt = jnp.asarray(rng.integers(0, dims["vocab_size"], (batch, width)), jnp.int32)
    lengths = jnp.full((batch,), width, jnp.int32)
    call = lambda: gpt_generate(model, params, prompt, lengths, max_new_tokens=new,
                                temperature=0.0).block_until_ready()
    call()  # compile
    return _best(call, repeats)

  out = {"tokens_per_sec": {}, "ms_per_token_at": {}}
  for b in batches:
    out["tokens_per_sec"][str(b)] = b * NEW / run(b, PROMPT, NEW)
    _note("ours batch", b, "tokens/s", out["tokens_per_sec"][str(b)])
  if bf16:  # the same weights, matmul operands in bfloat16 (float32 accumulation)
    from bert_jax.decoding import weights as decode_weights  # pylint: disable=g-import-not-at-top
    bf16_cfg = cfg.replace(matmul_dtype="bfloat16")
    bf16_model = GPT(bf16_cfg)
    bf16_params = decode_weights.cast_kernels(params, bf16_cfg)  # once, as `generate` does at load
    out["bf16_tokens_per_sec"] = {}
    for b in batches:
      out["bf16_tokens_per_sec"][str(b)] = b * NEW / run(b, PROMPT, NEW, bf16_model,
                                                         bf16_params)
      _note("ours bf16 matmuls batch", b, "tokens/s", out["bf16_tokens_per_sec"][str(b)])
  # Time per token at a position: one cache of every position slot for all of them (so the
  # program is the same size), k new tokens after a prompt of `pos` minus 1 new token.
  from bert_jax.decoding import gpt_init_cache, gpt_step_fn, sample  # pylint: disable=g-import-not-at-top
  import functools  # pylint: disable=g-import-not-at-top
  slots, k = dims["n_positions"], 33

  @functools.partial(jax.jit, static_argnames="new")
  def continue_in_full_cache(params, prompt, new):
    cache = gpt_init_cache(model, 1, slots)
    return sample(gpt_step_fn(model, params, last_only=True), cache, prompt,
                  jnp.full((1,), prompt.shape[1], jnp.int32), max_new_tokens=new,
                  temperature=0.0)

  for pos in (32, 512, slots - k - 1):
    prompt = jnp.asarray(rng.integers(0, dims["vocab_size"], (1, pos)), jnp.int32)
    times = {}
    for new in (1, k):
      call = lambda new=new: continue_in_full_cache(params, prompt, new).block_until_ready()
      call()
      times[new] = _best(call, repeats)
    out["ms_per_token_at"][str(pos)] = 1000 * (times[k] - times[1]) / (k - 1)
    _note("ours ms/token at position", pos, out["ms_per_token_at"][str(pos)])
  return out


# --------------------------------------------------------------------------- theirs
def theirs(dims: dict, batches, repeats: int, threads: int) -> dict:
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(threads)
  torch.manual_seed(0)
  model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**dims)).eval()
  out = {"tokens_per_sec": {}, "torch": torch.__version__,
         "transformers": transformers.__version__, "threads": threads}
  for b in batches:
    ids = torch.randint(0, dims["vocab_size"], (b, PROMPT))
    mask = torch.ones_like(ids)
    call = lambda: model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW,
                                  min_new_tokens=NEW, pad_token_id=0)
    with torch.inference_mode():
      call()  # warm-up
      out["tokens_per_sec"][str(b)] = b * NEW / _best(call, repeats)
    _note("theirs batch", b, "tokens/s", out["tokens_per_sec"][str(b)])
  return out


def generate_result(result: dict, load_before: float) -> dict:
  """bench/results/cpu_vs_pytorch-generate.json from main's `result` (both sides)."""
  ours, theirs, figures = result["ours"], result["theirs"], []
  what = f"prompt {PROMPT}, {NEW} new tokens, greedy"
  for b in ours["tokens_per_sec"]:
    for side, value in (("ours", ours["tokens_per_sec"][b]),
                        ("GPT2LMHeadModel.generate", theirs["tokens_per_sec"][b]),
                        ("ours, bf16 matmuls", ours.get("bf16_tokens_per_sec", {}).get(b))):
      if value is not None:
        figures.append(results_io.figure(f"{side}, batch {b}", round(value, 1),
                                         "tokens/s", what))
    for key, side in (("speedup", "ours"), ("speedup_bf16", "ours, bf16 matmuls")):
      if b in result.get(key, {}):
        figures.append(results_io.figure(f"{side} / GPT2LMHeadModel.generate, batch {b}",
                                         round(result[key][b], 2), "x", "tokens/s"))
  for pos, ms in ours["ms_per_token_at"].items():
    figures.append(results_io.figure(f"ours, time per new token at position {pos}",
                                     round(ms, 2), "ms", f"batch 1, one cache of "
                                     f"{result['n_positions']} slots"))
  head = f"GPT {result['dims']} dims " + ", ".join(
      f"{x:.2f}x batch {b}" for b, x in result["speedup"].items())
  if "speedup_bf16" in result:
    head += "; bf16 matmuls " + ", ".join(
        f"{x:.2f}x batch {b}" for b, x in result["speedup_bf16"].items())
  return results_io.result(
      "cpu_vs_pytorch", "GPT generation vs transformers (CPU)", figures,
      "transformers' GPT2LMHeadModel.generate, same dimensions, random weights",
      head + " GPT2LMHeadModel.generate tokens/s", case="generate", load_before=load_before,
      notes="data, no goal: CPU speed against PyTorch is no longer a project goal. "
            f"{result['dims']} dims: {result['n_layer']} layers, width {result['n_embd']}, "
            f"vocabulary {result['vocab_size']}; transformers {theirs['transformers']}, "
            f"torch {theirs['torch']}, {theirs['threads']} threads.")


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--dims", choices=sorted(DIMS), default="small")
  p.add_argument("--batches", default="1,16")
  p.add_argument("--repeats", type=int, default=2)
  p.add_argument("--side", choices=["both", "ours", "theirs"], default="both")
  p.add_argument("--bf16", action="store_true",
                 help="also ours with bfloat16 matmul operands (matmul_dtype)")
  p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
  p.add_argument("--ref_python", default=os.environ.get(
      "REF_PYTHON", "/work/main/.venv-ref/bin/python"))
  p.add_argument("--results-dir", default=results_io.RESULTS_DIR,
                 help="where the result JSON goes (default bench/results)")
  p.add_argument("--no-result", action="store_true", help="print only")
  args = p.parse_args()
  dims, batches = DIMS[args.dims], [int(b) for b in args.batches.split(",")]
  if args.side == "theirs":
    print(json.dumps(theirs(dims, batches, args.repeats, args.threads)))
    return
  sys.path[:0] = [os.path.dirname(BENCH), BENCH]  # the repository root, bench/
  import bench_util  # pylint: disable=g-import-not-at-top
  bench_util.header("bench/inference/generate.py")
  load_before = results_io.load()
  result = {"dims": args.dims, **dims, "prompt": PROMPT, "new_tokens": NEW}
  if args.side == "both":
    proc = subprocess.run(
        [args.ref_python, os.path.abspath(__file__), "--side", "theirs", "--dims", args.dims,
         "--batches", args.batches, "--repeats", str(args.repeats),
         "--threads", str(args.threads)], capture_output=True, text=True, check=False)
    if proc.returncode:
      sys.exit(f"the reference side failed:\n{proc.stderr[-3000:]}")
    result["theirs"] = json.loads(proc.stdout.strip().splitlines()[-1])
  result["ours"] = ours(dims, batches, args.repeats, args.bf16)
  if "theirs" in result:
    for key, name in (("tokens_per_sec", "speedup"), ("bf16_tokens_per_sec", "speedup_bf16")):
      if key in result["ours"]:
        result[name] = {
            b: result["ours"][key][b] / result["theirs"]["tokens_per_sec"][b]
            for b in result["ours"][key]}
  print(json.dumps(result, indent=1))
  print(bench_util.load_line("end"))
  if "theirs" in result:
    res = generate_result(result, load_before)
    print(res["title"], "-", res["headline"])
    if not args.no_result:
      print("wrote", results_io.write(res, args.results_dir))


if __name__ == "__main__":
  main()
