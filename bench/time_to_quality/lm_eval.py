"""Held-out loss / perplexity / bits per byte of an `lm` config, before or after training.

  python bench/time_to_quality/lm_eval.py --config configs/gpt.py                      # the init (step 0)
  python bench/time_to_quality/lm_eval.py --config configs/gpt.py --workdir workdirs/gpt_tiny   # latest ckpt

"Before" is the model the loop starts from (same seed, same init); "after" is the
workdir's latest checkpoint (or a step dir). Every held-out target is scored once.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import sys

import flax.linen as nn
import jax

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/
from bert_jax.checkpoint import manager as checkpoint  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax.runtime import parallel  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax.tasks import registry  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax.train import steps  # noqa: E402  pylint: disable=g-import-not-at-top


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--config", default="configs/gpt.py", help="FILE[:ARG]")
  p.add_argument("--workdir", default=None, help="evaluate its latest checkpoint")
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--matmul_dtype", default=None, help="e.g. bfloat16 (config.model.matmul_dtype)")
  args = p.parse_args()
  path, _, arg = args.config.partition(":")
  spec = importlib.util.spec_from_file_location("config_module", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config(arg or None)
  if args.matmul_dtype:
    config.model.matmul_dtype = args.matmul_dtype
  task = registry.get_task(config)
  task.prepare(args.workdir or "")
  if args.workdir:
    _, params, _ = checkpoint.load_params_for_inference(args.workdir)
    where = args.workdir
  else:  # what train_and_evaluate initializes (create_sharded_state) from config.seed
    params_key, _ = jax.random.split(jax.random.key(config.seed))
    dummy = task.dummy_batch(1, **task.phase_shapes({}))
    params = nn.unbox(task.init(params_key, dummy)["params"])
    where = "init"
  eval_fn = jax.jit(functools.partial(steps.eval_step, task=task))
  total = None
  with jax.set_mesh(parallel.create_mesh(tuple(config.mesh_shape))):
    for batch in task.eval_iterator({}, args.batch_size, 0, 1):
      sums = jax.device_get(eval_fn(params, batch))
      total = sums if total is None else jax.tree_util.tree_map(lambda a, b: a + b, total,
                                                                sums)
  ratios = {k: float(v) for k, v in task.metric_ratios(total).items()}
  print(json.dumps({"params": where, "matmul_dtype": args.matmul_dtype, "tokens": float(total["tokens"]), **ratios}, indent=1))


if __name__ == "__main__":
  main()
