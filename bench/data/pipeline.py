"""Data pipeline throughput: preparation rate, masking + batching, the full iterator.

Run (offline, the embedded corpus; ~3 minutes on a 2-core CPU):
  python bench/data/pipeline.py

Reports, at max_seq_length 128 (20 predictions) and 512 (80):
  * prepare: from scratch at 128 (documents: read + strip wiki markup + sentence-split +
    write; vocab training; instances: tokenize + NSP pairs + write), documents/s and
    tokens/s; at 512 the instances only (documents and vocab are reused);
  * mask: Masker alone on padded batches already in memory;
  * batch from memory: padding parsed instances into [B, L] arrays + masking;
  * batch: reading instances from the array_record files (tfds data source) + parsing +
    padding + masking, one thread (BatchMaker, what each grain worker runs per batch);
  * iterator: make_train_iterator end to end (grain, read threads, worker processes).
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/
# pylint: disable=g-import-not-at-top,wrong-import-position
from bert_jax import hardware  # noqa: E402  pylint: disable=wrong-import-position
from bert_jax.data import loader, prepare, sampling
from bert_jax.train import defaults

hardware.configure()  # an entry point: the platform settled as the CLIs settle it
from bench import results_io


def rate(fn, items_per_call: int, seconds: float, windows: int = 10) -> tuple[float, float]:
  """(items per wall second, items per CPU second) of repeated fn() calls.

  Wall: the best of `windows` windows, not the mean: the machine's 2 cores are shared
  and the figure wanted is what the code does when it gets a core. CPU: items over the
  process's CPU time (all its threads) for the whole run, immune to the neighbours' load
  but blind to work done in child processes (grain workers).
  """
  fn()  # warm-up
  best, items, cpu = 0.0, 0, time.process_time()
  for _ in range(windows):
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds / windows:
      fn()
      calls += 1
    best = max(best, calls * items_per_call / (time.perf_counter() - start))
    items += calls * items_per_call
  return best, items / (time.process_time() - cpu)


def fmt(rates: tuple[float, float]) -> str:
  return f"{rates[0]:,.0f} sequences/s ({rates[1]:,.0f} per CPU-second)"


def bench_length(args, length: int, predictions: int):
  """Yields the table rows of one sequence length, each as soon as it is measured."""
  cfg = defaults.data_config()
  cfg.data_dir = args.data_dir
  cfg.vocab_size = args.vocab_size
  cfg.max_seq_length = length
  cfg.max_predictions_per_seq = predictions
  cfg.dupe_factor = args.dupe_factor
  cfg.prepare_processes = args.prepare_processes
  prepared = prepare.prepare(cfg, verbose=False)
  stats, seconds = prepared.stats, prepared.stats["seconds"]
  documents = stats["corpus"]["documents"]
  tokens = sum(s["tokens"] for s in stats["instances"].values())
  if seconds["documents"]:  # built in this run, not reused
    yield ("prepare: documents (read, strip markup, split, write)",
           documents / seconds["documents"], "documents/s",
           f"{documents / seconds['documents']:,.0f} documents/s ({documents} documents, "
           f"{seconds['documents']:.1f} s); vocab training {seconds['vocab']:.1f} s")
  yield ("prepare: instances (tokenize, NSP pairs, write)", stats["tokens_per_second"],
         "tokens/s",
         f"{stats['documents_per_second']:,.0f} documents/s, {stats['tokens_per_second']:,.0f} "
         f"tokens/s ({tokens:,} tokens, {prepared.num_examples['train']:,} train instances, "
         f"{seconds['instances']:.1f} s, prepare_processes={args.prepare_processes})")
  b = args.batch_size
  source = loader.InstanceSource(prepared.instances_dir, "train")
  masker = loader.make_masker(cfg, prepared, seed=0)
  maker = loader.BatchMaker(source, masker, length, prepared.special.pad, nsp=True)
  keys = sampling.TrainKeys(len(source), b, 0, 1, seed=0)
  padded = [maker(keys(j))["input_ids"] for j in range(8)]  # already masked: fine for timing
  records = [source.__getitems__(keys(j)[:, 1].tolist()) for j in range(8)]
  index = np.arange(b)
  step = iter(range(10**9))

  class InMemory:  # the 8 batches' records, already read and parsed
    def __getitems__(self, indices):
      return records[next(step) % 8][:len(indices)]

  from_memory = loader.BatchMaker(InMemory(), masker, length, prepared.special.pad, nsp=True)

  def mask_only():
    masker(padded[next(step) % 8], 0, index)

  def pad_and_mask():
    from_memory(keys(0))

  def one_batch():
    maker(keys(next(step)))

  for stage, fn in (("mask", mask_only), ("batch from memory (pad + mask)", pad_and_mask),
                    ("batch (read + parse + pad + mask)", one_batch)):
    rates = rate(fn, b, args.seconds)
    yield stage, rates[0], "sequences/s", fmt(rates)
  for workers, threads in ((0, 0), (0, 2), (2, 1)):
    cfg.read_threads = threads
    it = loader.make_train_iterator(cfg, prepared, b, shard_index=0, shard_count=1,
                                    num_workers=workers)
    next(it)  # workers started, buffers warm
    # Wall time only: the workers' CPU is not this process's. Longer windows, so a
    # window measures production, not a prefetch buffer draining.
    seq_s, _ = rate(it.__next__, b, args.seconds, windows=5)
    if hasattr(it, "close"):
      it.close()
    yield (f"iterator, {workers} workers x {threads} read threads", seq_s, "sequences/s",
           f"{seq_s:,.0f} sequences/s (wall)")


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--data_dir", default=None,
                      help="prepared data to (re)use; default: a fresh temporary directory, "
                      "so the preparation is measured from scratch, deleted at the end")
  parser.add_argument("--batch_size", type=int, default=256)
  parser.add_argument("--seconds", type=float, default=8.0)
  parser.add_argument("--vocab_size", type=int, default=30522)
  parser.add_argument("--dupe_factor", type=int, default=1)
  parser.add_argument("--prepare_processes", type=int, default=1)
  parser.add_argument("--no_result", action="store_true",
                      help="print the table only; no bench/results/data_pipeline.json")
  args = parser.parse_args()
  load_before = results_io.load()
  print(f"cpus: {os.cpu_count()}, batch {args.batch_size}, load average {load_before:.1f}")
  print("| seq | stage | rate |\n| --- | --- | --- |")
  temporary = args.data_dir is None
  if temporary:  # 128 then prepares from scratch: documents, vocab, instances
    args.data_dir = tempfile.mkdtemp(prefix="bert_jax_bench_")
  figures = {}
  try:
    for length, predictions in ((128, 20), (512, 80)):
      for stage, value, unit, text in bench_length(args, length, predictions):
        print(f"| {length} | {stage} | {text} (load {results_io.load():.1f}) |", flush=True)
        figures[f"{length} {stage}"] = results_io.figure(f"seq {length}: {stage}",
                                                         round(value), unit)
  finally:
    if temporary:
      shutil.rmtree(args.data_dir, ignore_errors=True)
  if args.no_result:
    return
  key = "128 batch from memory (pad + mask)"
  value = figures[key]["value"]
  it = figures["128 iterator, 2 workers x 1 read threads"]["value"]
  print("wrote", results_io.write(results_io.result(
      "data_pipeline", "Data pipeline throughput", list(figures.values()),
      "none: the rate the train step needs (a step's batch in well under its step time)",
      f"{value:,} seq/s pad + mask at 128; {it:,} seq/s the iterator (2 workers)",
      goal_=results_io.goal("masking + batching at seq 128", ">= 20,000 sequences/s",
                            value >= 20_000), load_before=load_before,
      notes="wall figures: the best of short windows (the CPU is shared)")))


if __name__ == "__main__":
  main()
