"""Skinny matmuls, XLA vs torch: what bounds a decoding step on this CPU.

  /work/main/.venv/bin/python tools/skinny_gemm.py [--ref_python PY] \
      [--variants default,xnnpack,onednn]

A decode step multiplies a few rows (batch x beam) by every weight matrix of the model.
This times exactly those products for the Vaswani-base decoder of bench/inference/decode.py
(6 layers: self-attention q/k/v/o and cross-attention q/o 512x512, FFN 512x2048 and
2048x512, output 512x8000) at M = 1 to 128 rows: ours as one jitted XLA function per
XLA_FLAGS variant (each in its own process: the flags are read when the backend starts),
with float32 weights and with bfloat16 weights and rows (float32 accumulation, what
`model.matmul_dtype="bfloat16"` runs); theirs as torch matmuls (2 threads) in the
reference venv, float32 and bfloat16. Distinct random weights on both sides. Prints
GFLOP/s and ms a step; compare with the large-matmul peak the loop's MFU uses
(bert_jax.train.mfu.measured_peak_flops).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(512, 512)] * 36 + [(512, 2048), (2048, 512)] * 6 + [(512, 8000)]
ROWS = (1, 4, 8, 16, 32, 64, 128)
REPS = 10

_THEIRS = """
import json, sys, time, torch
torch.set_num_threads(2)
shapes, rows, reps = json.loads(sys.argv[1])
g = torch.Generator().manual_seed(0)
out = {}
with torch.no_grad():
  for dt in (torch.float32, torch.bfloat16):
    ws = [torch.randn(a, b, generator=g).to(dt) for a, b in shapes]
    for m in rows:
      xs = {k: torch.randn(m, k, generator=g).to(dt) for k in {a for a, _ in shapes}}
      run = lambda: sum(float((xs[w.shape[0]] @ w)[0, 0]) for w in ws)
      run()
      t = time.perf_counter()
      for _ in range(reps):
        run()
      out[f"{str(dt).split('.')[-1]} {m}"] = (time.perf_counter() - t) / reps
print(json.dumps(out))
"""

_OURS = """
import json, sys, time
import jax, jax.numpy as jnp
shapes, rows, reps = json.loads(sys.argv[1])
keys = jax.random.split(jax.random.key(0), len(shapes))
out = {}
for dt in (jnp.float32, jnp.bfloat16):
  ws = [jax.random.normal(k, tuple(s)).astype(dt) for k, s in zip(keys, shapes)]
  for m in rows:
    xs = {k: jnp.ones((m, k), dt) for k in {a for a, _ in shapes}}

    @jax.jit
    def run(xs, ws):  # every product is computed; float32 accumulation as in the model
      return sum(jax.lax.dot(xs[w.shape[0]], w, preferred_element_type=jnp.float32)[0, 0]
                 for w in ws)

    run(xs, ws).block_until_ready()
    t = time.perf_counter()
    for _ in range(reps):
      run(xs, ws).block_until_ready()
    out[f"{jnp.dtype(dt).name} {m}"] = (time.perf_counter() - t) / reps
print(json.dumps(out))
"""


# Our side's XLA_FLAGS variants: XLA:CPU's own dot emitter, or dots routed to XNNPACK or
# oneDNN (flags of the installed jaxlib).
VARIANTS = {"default": "", "xnnpack": "--xla_cpu_use_xnnpack=true",
            "onednn": "--xla_cpu_use_onednn=true"}


def _run(python: str, script: str, env: dict | None = None) -> dict:
  proc = subprocess.run([python, "-c", script, json.dumps([SHAPES, ROWS, REPS])],
                        check=True, capture_output=True, text=True, env=env)
  return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--ref_python", default=os.environ.get(
      "REF_PYTHON", os.path.join(ROOT, ".venv-ref", "bin", "python")))
  p.add_argument("--variants", default="default",
                 help=f"comma-separated XLA_FLAGS variants of ours: {', '.join(VARIANTS)}")
  args = p.parse_args()
  unknown = set(args.variants.split(",")) - set(VARIANTS)
  if unknown:
    p.error(f"--variants: unknown {sorted(unknown)}; known: {', '.join(VARIANTS)}")
  sys.path.insert(0, os.path.join(ROOT, "bench"))
  import bench_util  # pylint: disable=g-import-not-at-top
  bench_util.header("tools/skinny_gemm.py")
  columns = {}
  for name in args.variants.split(","):  # each in its own process, torch after the first
    env = dict(os.environ, XLA_FLAGS=VARIANTS[name], JAX_PLATFORMS="cpu")
    columns[f"XLA {name}"] = _run(sys.executable, _OURS, env)
    if "torch" not in columns:
      columns["torch"] = _run(args.ref_python, _THEIRS)
  params = sum(a * b for a, b in SHAPES)
  print(f"{params / 1e6:.1f}M weights a step; GFLOP/s (ms a step)")
  for dt in ("float32", "bfloat16"):
    print(f"\n{dt} weights and rows:\n")
    print("| rows | " + " | ".join(columns) + " |")
    print("| --- |" + " --- |" * len(columns))
    for m in ROWS:
      flops = 2.0 * m * params
      cells = [f"{flops / c[f'{dt} {m}'] / 1e9:.1f} ({c[f'{dt} {m}'] * 1e3:.1f})"
               for c in columns.values()]
      print(f"| {m} | " + " | ".join(cells) + " |")
  print(bench_util.load_line("end"))


if __name__ == "__main__":
  main()
