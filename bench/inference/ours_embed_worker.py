"""Our Python API side of bench/inference/embed.py: `bert_jax.load(...).encode` in a fresh process.

Started by the driver with our venv's python, never run by hand:

  .venv/bin/python bench/inference/ours_embed_worker.py --input S.txt --output V.npy --batch-size 64

Times, in this process: `import bert_jax` + the API module (JAX), `bert_jax.load` of the
packaged all-MiniLM-L6-v2, and one `encode` of all lines (mean pooling, max_length 256 as
the model's sentence_bert_config.json, which load reads). It is the first call in the
process, so it includes every compile; their seconds (tracing + lowering + XLA, from
jax.monitoring) and count (shapes of embed._forward) are reported separately. Answers
one JSON line on stdout.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

T_START = time.perf_counter()
_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/
import bench_util  # noqa: E402  pylint: disable=wrong-import-position

PROG = "ours_embed_worker"
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--input", required=True)
  parser.add_argument("--output", required=True)
  parser.add_argument("--batch-size", type=int, default=64)
  parser.add_argument("--calls", type=int, default=1,
                      help="encode calls; the later ones' best is reported as encode_warm_s")
  parser.add_argument("--model", default="all-MiniLM-L6-v2")
  args = parser.parse_args()
  with open(args.input, encoding="utf-8") as f:
    texts = f.read().split("\n")[:-1]
  t0 = time.perf_counter()
  np, jax, bert_jax, api, embed = bench_util.worker_imports(
      PROG, bench_util.OUR_VENV, "numpy", "jax", "bert_jax", "bert_jax.api", "bert_jax.inference.encode")
  compile_s = [0.0]

  def listen(event, seconds, **_):
    if event in COMPILE_EVENTS:
      compile_s[0] += seconds
  jax.monitoring.register_event_duration_secs_listener(listen)
  t1 = time.perf_counter()
  try:
    model = bert_jax.load(args.model)
  except (OSError, ValueError) as e:
    bench_util.fail(PROG, str(e))
  t2 = time.perf_counter()
  vectors = model.encode(texts, batch_size=args.batch_size)   # [texts, 384]
  t3 = time.perf_counter()
  compiles = embed._forward._cache_size()  # pylint: disable=protected-access
  warm = {}
  for _ in range(args.calls - 1):  # the same texts again: no compile
    t = time.perf_counter()
    model.encode(texts, batch_size=args.batch_size)
    warm["encode_warm_s"] = min(warm.get("encode_warm_s", 1e9), time.perf_counter() - t)
  np.save(args.output, vectors)
  bench_util.reply({**warm,
      "import_s": t1 - t0, "load_s": t2 - t1, "encode_s": t3 - t2, "compile_s": compile_s[0],
      "compiles": compiles,
      "max_length": model.max_length, "process_s": time.perf_counter() - T_START,
      "api_module": api.__file__, "versions": f"jax {jax.__version__}"})


if __name__ == "__main__":
  main()
