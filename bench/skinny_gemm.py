"""Skinny matmuls, XLA vs torch: what bounds a decoding step on this CPU.

  /work/main/.venv/bin/python bench/skinny_gemm.py [--ref_python PY]

A decode step multiplies a few rows (batch x beam) by every weight matrix of the model.
This times exactly those products for the Vaswani-base decoder of bench/decode.py
(6 layers: self-attention q/k/v/o and cross-attention q/o 512x512, FFN 512x2048 and
2048x512, output 512x8000) at M = 1, 32 and 128 rows: ours as one jitted XLA function,
theirs as torch matmuls (2 threads) in the reference venv, distinct random float32
weights on both sides. Prints GFLOP/s; compare with the large-matmul peak the loop's MFU
uses (bert_jax.train.mfu.measured_peak_flops).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(512, 512)] * 36 + [(512, 2048), (2048, 512)] * 6 + [(512, 8000)]
ROWS = (1, 32, 128)
REPS = 20

_THEIRS = """
import json, sys, time, torch
torch.set_num_threads(2)
shapes, rows, reps = json.loads(sys.argv[1])
g = torch.Generator().manual_seed(0)
ws = [torch.randn(a, b, generator=g) for a, b in shapes]
out = {}
with torch.no_grad():
  for m in rows:
    xs = {k: torch.randn(m, k, generator=g) for k in {a for a, _ in shapes}}
    run = lambda: sum(float((xs[w.shape[0]] @ w)[0, 0]) for w in ws)
    run()
    t = time.perf_counter()
    for _ in range(reps):
      run()
    out[m] = (time.perf_counter() - t) / reps
print(json.dumps(out))
"""


def ours() -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  keys = jax.random.split(jax.random.key(0), len(SHAPES))
  ws = [jax.random.normal(k, s) for k, s in zip(keys, SHAPES)]
  out = {}
  for m in ROWS:
    xs = {k: jnp.ones((m, k)) for k in {a for a, _ in SHAPES}}

    @jax.jit
    def run(xs, ws):
      return sum((xs[w.shape[0]] @ w)[0, 0] for w in ws)  # every product is computed

    run(xs, ws).block_until_ready()
    t = time.perf_counter()
    for _ in range(REPS):
      run(xs, ws).block_until_ready()
    out[m] = (time.perf_counter() - t) / REPS
  return out


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--ref_python", default=os.environ.get(
      "REF_PYTHON", os.path.join(ROOT, ".venv-ref", "bin", "python")))
  args = p.parse_args()
  mine = ours()
  theirs = json.loads(subprocess.run(
      [args.ref_python, "-c", _THEIRS, json.dumps([SHAPES, ROWS, REPS])],
      check=True, capture_output=True, text=True).stdout)
  params = sum(a * b for a, b in SHAPES)
  print(f"{params / 1e6:.1f}M weights a step; GFLOP/s (ms a step)")
  print("| rows | XLA (ours) | torch |")
  print("| --- | --- | --- |")
  for m in ROWS:
    flops = 2.0 * m * params
    a, b = mine[m], theirs[str(m)]
    print(f"| {m} | {flops / a / 1e9:.1f} ({a * 1e3:.1f}) | {flops / b / 1e9:.1f} ({b * 1e3:.1f}) |")


if __name__ == "__main__":
  main()
