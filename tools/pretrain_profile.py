"""Our pretraining train step op by op (issue 41's "what limits it"): where a step of
bench/time_to_quality/time_to_quality.py's BERT-base window goes on this CPU.

  .venv/bin/python tools/pretrain_profile.py [--config configs/bert_tiny.py:bert]
      [--sizes base|config] [--batch 8] [--steps 3] [--top 25] [--data_dir ~/bert_jax_data]

Builds what time_to_quality's `base` stage trains on our side (bench/time_to_quality/ours_worker.py's
config loading): the config, at BERT-base's sizes by default (768 x 12 layers, 12 heads,
MLP 3072: time_to_quality.BASE_DIMS) with --batch rows, its task prepared in --data_dir
(cached), the state and jitted steps through train/loop.py's own helpers, on one device;
then times and traces it as tools/finetune_profile.py does (XLA:CPU's per-thunk events
summed by the jax op they come from; the same buckets). Thunks that run concurrently are
each counted whole, so the buckets can sum to more than the step.
"""
from __future__ import annotations

import argparse
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The root, bench/ (bench_util) and the suites whose parts the probes reuse.
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "bench")] + [
    os.path.join(_ROOT, "bench", d) for d in ("time_to_quality", "finetune", "inference")]


def build(args):
  """(step function of no arguments, real tokens a step) of the configured pretraining."""
  import finetune_profile
  import ours_worker as ttq_ours_worker
  from stages import BASE_DIMS
  from bert_jax.tasks import registry
  sizes = {f"model.{k}": v for k, v in BASE_DIMS.items()} if args.sizes == "base" else {}
  c = ttq_ours_worker.load_config(args.config, {
      "data.data_dir": os.path.expanduser(args.data_dir), "train.batch_size": args.batch,
      **sizes})
  task = registry.get_task(c)
  task.prepare(os.path.expanduser(args.data_dir))
  step, batches = finetune_profile.loop_step(task, c, num_batches=3)
  # Real tokens: BERT's batches mark them in input_mask, a language model's in its
  # weights, translation's as the non-zero target ids.
  def real(b):
    if "input_mask" in b or "weights" in b:
      return float(b["input_mask" if "input_mask" in b else "weights"].sum())
    return float((b["tgt_ids"] > 0).sum())
  tokens = sum(real(b) for b in batches) / len(batches)
  return step, tokens


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--config", default="configs/bert_tiny.py:bert")
  p.add_argument("--sizes", choices=("base", "config"), default="base",
                 help="BERT-base's sizes (time_to_quality's base window) or the config's own")
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--steps", type=int, default=3)
  p.add_argument("--top", type=int, default=25)
  p.add_argument("--data_dir", default="~/bert_jax_data")
  args = p.parse_args()
  import decode_profile
  import finetune_profile
  decode_profile.with_hlo_dump("pretrain_hlo_")
  print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
  step, tokens = build(args)
  wall, per_cat, per_src = finetune_profile.profile(step, args.steps)
  print(f"{args.config} at {args.sizes} sizes, batch {args.batch}: {tokens:.0f} real tokens a "
        f"step; {1e3 * wall:.0f} ms a step untraced ({tokens / wall:.1f} tokens/s); op time "
        f"{sum(per_cat.values()):.0f} ms a step (summed over XLA's threads)")
  finetune_profile.print_buckets(per_cat)
  finetune_profile.print_ops(per_src, args.top)
  print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
