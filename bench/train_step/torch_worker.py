"""PyTorch side of bench/train_step/train_step.py: transformers' BertForPreTraining + torch AdamW.

Started by the driver with the reference venv's python (torch + transformers, see
requirements-ref.txt), never run by hand:

  .venv-ref/bin/python bench/train_step/torch_worker.py --spec SPEC.json

SPEC (written by train_step.py) holds the model shape, the optimizer hyper-parameters,
the thread count and the path of the batch (.npz, the arrays train_step.hf_batch gives
the Flax reference: labels -100 off the masked positions). The worker builds the model
(random init, float32, train mode: dropout on), runs one step (its loss and seconds are
reported: the driver compares first losses across systems), the warm-up steps, answers
{"ready": ...}, then answers each {"cmd": "run", "steps": n} with the seconds per step of
n steps. Between commands it blocks on stdin: no CPU while the other systems are timed.

The optimizer is our optim.make_optimizer written in torch: global-norm clip, AdamW
(decoupled weight decay lr * wd * param, bias-corrected moments, eps outside the sqrt as
optax and torch both do) with weight decay on every matrix (ndim > 1: not LayerNorm
weights, not biases, as optim.decay_mask), linear warmup from 0 then linear decay to 0
(optax evaluates the schedule at the pre-update count, LambdaLR at the scheduler's step
count: both 0 on the first step).
"""
from __future__ import annotations

import os
import sys
import time

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/
import bench_util  # noqa: E402  pylint: disable=wrong-import-position

PROG = "torch_train_worker"


def linear_warmup_decay(warmup: int, total: int):
  """LambdaLR factor of optim.learning_rate_schedule's "linear" schedule."""
  warm = max(warmup, 1)

  def factor(step: int) -> float:
    if step < warmup:
      return step / warm
    return max(0.0, 1.0 - (step - warmup) / max(total - warmup, 1))
  return factor


def main():
  spec = bench_util.read_spec(PROG)
  np, torch, transformers = bench_util.worker_imports(PROG, bench_util.REF_VENV, "numpy",
                                                      "torch", "transformers")
  m, t = spec["model"], spec["train"]
  torch.set_num_threads(int(spec["threads"]))
  torch.manual_seed(0)
  cfg = transformers.BertConfig(
      vocab_size=m["vocab_size"], hidden_size=m["hidden_size"],
      num_hidden_layers=m["num_layers"], num_attention_heads=m["num_heads"],
      intermediate_size=m["d_mlp"], hidden_act="gelu", hidden_dropout_prob=m["dropout_rate"],
      attention_probs_dropout_prob=m["attention_dropout_rate"],
      max_position_embeddings=m["max_len"], type_vocab_size=m["type_vocab_size"],
      layer_norm_eps=m["layer_norm_eps"], initializer_range=m["init_std"])
  model = transformers.BertForPreTraining(cfg).float().train()
  decay = [p for n, p in model.named_parameters() if p.ndim > 1]
  no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
  opt = torch.optim.AdamW([{"params": decay, "weight_decay": t["weight_decay"]},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=t["learning_rate"], betas=(t["b1"], t["b2"]), eps=t["eps"])
  sched = torch.optim.lr_scheduler.LambdaLR(
      opt, linear_warmup_decay(int(t["warmup_steps"]), int(t["num_steps"])))
  with np.load(spec["batch"]) as z:
    batch = {k: torch.from_numpy(z[k].astype(np.int64)) for k in z.files}

  def run(steps: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    loss = None
    for _ in range(steps):
      opt.zero_grad(set_to_none=True)
      loss = model(**batch).loss                     # MLM (labels != -100) + NSP
      loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip_norm"])
      opt.step()
      sched.step()
    value = float(loss)  # CPU torch runs eagerly: the steps are done here
    return value, (time.perf_counter() - t0) / steps

  first_loss, first_s = run(1)
  if int(spec["warmup"]):
    run(int(spec["warmup"]))
  bench_util.reply({"ready": True, "first_loss": first_loss, "first_step_s": first_s,
                    "threads": torch.get_num_threads(),
                    "versions": f"torch {torch.__version__}, transformers "
                                f"{transformers.__version__}"})

  def handle_run(steps: int) -> dict:
    loss, dt = run(int(steps))
    if not np.isfinite(loss):
      bench_util.fail(PROG, f"non-finite loss {loss}")
    return {"loss": loss, "step_s": dt}
  bench_util.serve({"run": handle_run})


if __name__ == "__main__":
  main()
