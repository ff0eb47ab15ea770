"""Preparation at scale: in process (1 and 2 processes) vs Beam's DirectRunner (1 and 2 workers).

Run (offline; builds a ~100 MB corpus in --corpus_dir first, then prepares it from scratch
once per mode, interleaved, each mode in a fresh data_dir):
  python bench/data/prepare_beam.py --modes in_process:1,beam:1,in_process:2,beam:2

The corpus: the embedded corpus (the Wikipedia excerpt and Lee news corpus that gensim
ships in gensim/test/test_data, ~3.3 MB as text) written --copies times, each copy's
documents in another order and opened by a sentence naming the copy (so no two documents
are equal and the train/validation hash split differs per copy), one file per copy in
google-research/bert's format: a corpus of many files, as real ones are.

Reports, per mode, seconds and tokens/s of each stage (documents, vocab, instances) and of
the whole preparation; tokens are those the instances stage tokenized (train +
validation). Beam: `--direct_running_mode=multi_processing --direct_num_workers=N`.
"""
import argparse
import collections
import json
import os
import resource
import shutil
import sys
import tempfile
import time

import numpy as np

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/
# pylint: disable=g-import-not-at-top,wrong-import-position
from bench import bench_util
from bench import results_io
from bert_jax.data import corpora
from bert_jax.data.beam import util as beam_util
from bert_jax.data import prepare as prepare_lib
from bert_jax.train import defaults


def build_corpus(folder: str, copies: int) -> str:
  """Writes the corpus (unless there); returns its glob."""
  os.makedirs(folder, exist_ok=True)
  docs = list(corpora.embedded_documents(collections.Counter()))
  for k in range(copies):
    path = os.path.join(folder, f"copy-{k:03d}.txt")
    if os.path.exists(path):
      continue
    order = np.random.default_rng(k).permutation(len(docs))
    with open(path + ".tmp", "w", encoding="utf-8") as f:
      for i in order:
        f.write(f"This is document {i} of copy {k}.\n" + "\n".join(docs[i]) + "\n\n")
    os.replace(path + ".tmp", path)
  return os.path.join(folder, "copy-*.txt")


def data_config(args, data_dir: str, processes: int):
  cfg = defaults.data_config()
  cfg.corpus, cfg.text_files, cfg.data_dir = "text", args.glob, data_dir
  cfg.vocab_size, cfg.dupe_factor, cfg.max_seq_length = args.vocab_size, args.dupe_factor, 128
  cfg.prepare_processes = processes
  return cfg


def cpu_seconds() -> float:
  """CPU seconds of this process (all its threads: tokenizers' Rust pool too) and of its
  finished children (worker processes, Beam's SDK workers)."""
  own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
  return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run_mode(args, mode: str):
  kind, n = mode.split(":")
  n = int(n)
  data_dir = tempfile.mkdtemp(prefix=f"prep-{kind}{n}-", dir=args.work_dir)
  beam = None
  if kind == "beam":
    beam = beam_util.BeamRun(
        "DirectRunner",
        f"--direct_running_mode=multi_processing --direct_num_workers={n}")
  cfg = data_config(args, data_dir, n)
  start, cpu, cpu_all = time.time(), time.process_time(), cpu_seconds()
  prepared = prepare_lib.prepare(cfg, verbose=False, beam=beam)
  wall = time.time() - start
  cpu_all = cpu_seconds() - cpu_all
  seconds = prepared.stats["seconds"]
  tokens = sum(s.get("tokens", 0) for s in prepared.stats["instances"].values())
  row = {"mode": mode, "tokens": tokens, "wall": wall, "parent_cpu": time.process_time() - cpu,
         "cpu": cpu_all, "whole_tok_per_cpu_s": tokens / cpu_all,
         **{f"{k}_s": v for k, v in seconds.items()},
         "instances_tok_s": tokens / seconds["instances"], "whole_tok_s": tokens / wall,
         "instances": prepared.num_examples, "vocab": prepared.vocab_path}
  with open(prepared.vocab_path, "rb") as f:
    row["vocab_sha"] = __import__("hashlib").sha256(f.read()).hexdigest()[:12]
  shutil.rmtree(data_dir, ignore_errors=True)
  return row


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--corpus_dir", default=os.path.expanduser("~/bert_jax_bench/corpus100"))
  parser.add_argument("--copies", type=int, default=31)
  parser.add_argument("--work_dir", default=os.path.expanduser("~/bert_jax_bench"))
  parser.add_argument("--modes", default="in_process:1,beam:1,in_process:2,beam:2")
  parser.add_argument("--vocab_size", type=int, default=30522)
  parser.add_argument("--dupe_factor", type=int, default=1)
  parser.add_argument("--build_only", action="store_true", help="write the corpus and stop")
  parser.add_argument("--no_result", action="store_true",
                      help="print only; no bench/results/prepare_beam.json")
  args = parser.parse_args()
  # Beam's worker processes import bert_jax from this checkout.
  os.environ["PYTHONPATH"] = bench_util.ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
  args.glob = build_corpus(args.corpus_dir, args.copies)
  size = sum(os.path.getsize(os.path.join(args.corpus_dir, f))
             for f in os.listdir(args.corpus_dir) if f.endswith(".txt"))
  if args.build_only:
    print(f"corpus: {args.glob}, {size / 1e6:.1f} MB")
    return
  os.makedirs(args.work_dir, exist_ok=True)
  bench_util.header("prepare_beam")
  print(f"corpus: {args.glob}, {size / 1e6:.1f} MB; vocab {args.vocab_size}, dupe_factor "
        f"{args.dupe_factor}, seq 128", flush=True)
  load_before, rows = results_io.load(), {}
  for mode in args.modes.split(","):
    row = run_mode(args, mode)
    rows[mode] = row
    print(json.dumps(row), flush=True)
    print(f"{mode:14s} whole {row['wall']:7.1f} s {row['whole_tok_s']:>9,.0f} tok/s | "
          f"documents {row['documents_s']:6.1f} s, vocab {row['vocab_s']:6.1f} s, instances "
          f"{row['instances_s']:6.1f} s {row['instances_tok_s']:>9,.0f} tok/s | CPU "
          f"{row['cpu']:6.1f} s, {row['whole_tok_per_cpu_s']:>9,.0f} tok/CPU-s | "
          f"{bench_util.load_line('after')}", flush=True)
  if not args.no_result:
    print("wrote", results_io.write(beam_result(rows, size, load_before)))


def beam_result(rows: dict, size: int, load_before: float) -> dict:
  """bench/results/prepare_beam.json; the goal needs beam:1, beam:2 and in_process:2."""
  figures = []
  for mode, r in rows.items():
    figures += [results_io.figure(f"{mode}: whole preparation", round(r["whole_tok_s"]),
                                  "tokens/s", f"{r['wall']:.1f} s"),
                results_io.figure(f"{mode}: per CPU-second", round(r["whole_tok_per_cpu_s"]),
                                  "tokens/CPU-s")]
  goal, headline = None, ", ".join(f"{m} {r['whole_tok_s']:,.0f} tok/s" for m, r in rows.items())
  if {"beam:1", "beam:2", "in_process:2"} <= set(rows):
    scaling = rows["beam:2"]["whole_tok_s"] / rows["beam:1"]["whole_tok_s"]
    per_core = rows["beam:2"]["whole_tok_per_cpu_s"] / rows["in_process:2"]["whole_tok_per_cpu_s"]
    figures += [results_io.figure("Beam 2 workers / 1 worker, whole preparation",
                                  round(scaling, 2), "x"),
                results_io.figure("Beam per CPU-second / in process (2 each)",
                                  round(per_core, 2), "x")]
    goal = results_io.goal("Beam scales and keeps its per-core rate",
                           "2 workers >= 1.6x 1 worker; per core >= 0.8x in process",
                           bool(scaling >= 1.6 and per_core >= 0.8))
    headline = (f"Beam 2 workers {scaling:.2f}x its 1 worker; per CPU-second {per_core:.2f}x "
                "in process")
  tokens = next(iter(rows.values()))["tokens"]
  return results_io.result(
      "prepare_beam", "Preparation at scale: Apache Beam vs in process", figures,
      f"in-process preparation of the same {size / 1e6:.0f} MB corpus ({tokens:,} tokens)",
      headline, goal_=goal, load_before=load_before,
      notes="Beam: DirectRunner, multi_processing; CPU includes finished child processes.")


if __name__ == "__main__":
  main()
