"""PyTorch side of bench/finetune/throughput.py: a plain transformers fine-tuning loop.

Started by the driver with the reference venv's python (torch + transformers,
requirements-ref.txt), never run by hand:

  .venv-ref/bin/python bench/finetune/torch_worker.py --spec SPEC.json

SPEC (written by the driver) names the model directory (the packaged all-MiniLM-L6-v2),
the batches (.npz: input_ids, input_mask, segment_ids, labels, each [steps, batch, ...],
exactly the batches our loop draws: same task, same seed), the optimizer
hyper-parameters and the thread count. The loop is what a transformers user writes:
`BertForSequenceClassification.from_pretrained(dir, num_labels=2)` in train mode
(dropout 0.1 as the model's config.json), per step zero_grad, forward with labels (its
cross-entropy), backward, `clip_grad_norm_`, AdamW, LambdaLR (linear warmup from 0 then
linear decay to 0, as optim.learning_rate_schedule), `loss.item()` (a log line's worth
of sync; eager CPU torch is synchronous anyway). AdamW's weight decay on every matrix
(ndim > 1), not on LayerNorm weights and biases, as optim.decay_mask. Answers one JSON
line: the seconds and loss of every step.
"""
from __future__ import annotations

import os
import sys
import time

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/
import bench_util  # noqa: E402  pylint: disable=wrong-import-position
from bench.train_step.torch_worker import linear_warmup_decay  # noqa: E402  pylint: disable=wrong-import-position

PROG = "torch_finetune_worker"


def main():
  spec = bench_util.read_spec(PROG)
  np, torch, transformers = bench_util.worker_imports(PROG, bench_util.REF_VENV, "numpy",
                                                      "torch", "transformers")
  t = spec["train"]
  torch.set_num_threads(int(spec["threads"]))
  torch.manual_seed(int(spec["seed"]))
  transformers.logging.set_verbosity_error()  # "newly initialized classifier" is expected
  t0 = time.perf_counter()
  model = transformers.BertForSequenceClassification.from_pretrained(
      spec["model_dir"], num_labels=int(spec["num_labels"])).float().train()
  load_s = time.perf_counter() - t0
  params = list(model.named_parameters())
  opt = torch.optim.AdamW(
      [{"params": [p for _, p in params if p.ndim > 1], "weight_decay": t["weight_decay"]},
       {"params": [p for _, p in params if p.ndim <= 1], "weight_decay": 0.0}],
      lr=t["learning_rate"], betas=(t["b1"], t["b2"]), eps=t["eps"])
  sched = torch.optim.lr_scheduler.LambdaLR(
      opt, linear_warmup_decay(int(spec["warmup_steps"]), int(spec["steps"])))
  with np.load(spec["batches"]) as z:
    data = {k: torch.from_numpy(z[k].astype(np.int64)) for k in z.files}
  step_s, losses = [], []
  for i in range(int(spec["steps"])):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    out = model(input_ids=data["input_ids"][i], attention_mask=data["input_mask"][i],
                token_type_ids=data["segment_ids"][i], labels=data["labels"][i])
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip_norm"])
    opt.step()
    sched.step()
    losses.append(out.loss.item())
    step_s.append(time.perf_counter() - t0)
  if not all(np.isfinite(losses)):
    bench_util.fail(PROG, f"non-finite loss at step {1 + int(np.argmin(np.isfinite(losses)))}")
  bench_util.reply({"step_s": step_s, "loss": losses, "load_s": load_s,
                    "threads": torch.get_num_threads(),
                    "versions": f"torch {torch.__version__}, transformers "
                                f"{transformers.__version__}"})


if __name__ == "__main__":
  main()
