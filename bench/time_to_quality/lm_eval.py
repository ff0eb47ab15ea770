"""Held-out loss / perplexity / bits per byte of an `lm` config, before or after training.

  python bench/time_to_quality/lm_eval.py --config configs/gpt.py                      # the init (step 0)
  python bench/time_to_quality/lm_eval.py --config configs/gpt.py --workdir workdirs/gpt_tiny   # latest ckpt
  python bench/time_to_quality/lm_eval.py --train --workdir /tmp/gpt_tiny --data_dir /tmp/gpt_data

"Before" is the model the loop starts from (same seed, same init); "after" is the
workdir's latest checkpoint (or a step dir). Every held-out target is scored once.

--train runs the README's GPT command first, `python -m bert_jax.main --config CONFIG
--workdir WORKDIR` (a new workdir: an existing one would be resumed), timed from its start
to its exit, then scores the init and the trained workdir, and writes
bench/results/gpt_tiny.json (gpt_result: the wall time against the README's 15 minutes,
held-out perplexity before and after). --data_dir DIR trains and scores on that data dir
(--config.data.data_dir): a new or empty one puts data preparation in the clock, as from a
fresh clone, and the result says which. --results-dir DIR writes the result there
instead; --no-result prints its headline only. Without --train nothing is written.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import flax.linen as nn
import jax

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ROOT = os.path.dirname(_BENCH)
sys.path[:0] = [_ROOT, _BENCH]  # the repository root, bench/
from bert_jax.checkpoint import manager as checkpoint  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax.runtime import parallel  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax.tasks import registry  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax.train import steps  # noqa: E402  pylint: disable=g-import-not-at-top
import results_io  # noqa: E402  pylint: disable=g-import-not-at-top

GOAL_S = 15 * 60  # configs/gpt.py: under 15 minutes on an idle 2-core CPU, all included


def load_config(spec: str, data_dir: str | None = None, matmul_dtype: str | None = None):
  path, _, arg = spec.partition(":")
  module_spec = importlib.util.spec_from_file_location("config_module", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  config = module.get_config(arg or None)
  if matmul_dtype:
    config.model.matmul_dtype = matmul_dtype
  if data_dir:
    config.data.data_dir = data_dir
  return config


def evaluate(config, workdir: str | None, batch_size: int) -> dict:
  """The held-out ratios (loss, perplexity, accuracy, bits_per_byte) and token count of
  `workdir`'s latest checkpoint, or of the init when workdir is None."""
  task = registry.get_task(config)
  task.prepare(workdir or "")
  if workdir:
    _, params, _ = checkpoint.load_params_for_inference(workdir)
  else:  # what train_and_evaluate initializes (create_sharded_state) from config.seed
    params_key, _ = jax.random.split(jax.random.key(config.seed))
    dummy = task.dummy_batch(1, **task.phase_shapes({}))
    params = nn.unbox(task.init(params_key, dummy)["params"])
  eval_fn = jax.jit(functools.partial(steps.eval_step, task=task))
  total = None
  with jax.set_mesh(parallel.create_mesh(tuple(config.mesh_shape))):
    for batch in task.eval_iterator({}, batch_size, 0, 1):
      sums = jax.device_get(eval_fn(params, batch))
      total = sums if total is None else jax.tree_util.tree_map(lambda a, b: a + b, total,
                                                                sums)
  ratios = {k: float(v) for k, v in task.metric_ratios(total).items()}
  return {"params": workdir or "init", "tokens": float(total["tokens"]), **ratios}


def latest_step(workdir: str) -> int:
  ckpts = os.path.join(workdir, "checkpoints")
  return max(int(d) for d in os.listdir(ckpts) if d.isdigit())


def train(config_spec: str, workdir: str, data_dir: str | None) -> float:
  """The README's GPT command in a child process; its wall seconds, start to exit. Its
  persistent XLA cache is a new empty dir, as a first run's: the compiles are in the clock
  (an earlier run's cache in ~/.cache/bert_jax/xla would skip them)."""
  argv = [sys.executable, "-m", "bert_jax.main", "--config", config_spec, "--workdir", workdir]
  if data_dir:
    argv.append(f"--config.data.data_dir={data_dir}")
  print("training:", " ".join(argv), flush=True)
  with tempfile.TemporaryDirectory(prefix="lm_eval_xla_") as cache:
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache)
    t0 = time.time()
    subprocess.run(argv, check=True, env=env)
    return time.time() - t0


def _ppl(x: float):
  return round(x) if x >= 100 else round(x, 2)


def gpt_result(train_s: float, fresh: bool, before: dict, after: dict, step: int,
               command: str, load_before: float | None) -> dict:
  """bench/results/gpt_tiny.json: the training command's wall time against GOAL_S and
  the held-out perplexity at the init and after training."""
  wall = "{} min {} s".format(*divmod(round(train_s), 60))
  data = ("data prepared in the clock (a fresh data dir)" if fresh else
          "data dir not empty at the start: preparation in the clock only for what it lacked")
  return results_io.result(
      "gpt_tiny", "GPT tiny, the README's GPT command",
      [results_io.figure("wall time of the training command", round(train_s), "s",
                         f"{wall}; {data}, compiles in the clock (a new XLA cache); "
                         f"`{command}`"),
       results_io.figure("held-out perplexity before training", _ppl(before["perplexity"]),
                         note=f"bits per byte {before['bits_per_byte']:.3f}"),
       results_io.figure(f"held-out perplexity after {step} steps", _ppl(after["perplexity"]),
                         note=f"bits per byte {after['bits_per_byte']:.3f}; "
                         f"{after['tokens']:,.0f} held-out tokens")],
      "the model at its init (python bench/time_to_quality/lm_eval.py)",
      f"{wall}; held-out perplexity {before['perplexity']:.0f} -> {after['perplexity']:.0f}",
      goal_=results_io.goal("the README's GPT command", f"<= {GOAL_S // 60} min",
                            train_s <= GOAL_S), load_before=load_before)


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--config", default="configs/gpt.py", help="FILE[:ARG]")
  p.add_argument("--workdir", default=None, help="evaluate its latest checkpoint")
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--matmul_dtype", default=None, help="e.g. bfloat16 (config.model.matmul_dtype)")
  p.add_argument("--train", action="store_true",
                 help="train --workdir (new) with the README's command first, timed; score "
                 "the init and the result; write the bench result")
  p.add_argument("--data_dir", default=None, help="--config.data.data_dir (default: the "
                 "config's)")
  p.add_argument("--results-dir", "--results_dir", dest="results_dir",
                 default=results_io.RESULTS_DIR, help="where gpt_tiny.json is written")
  p.add_argument("--no-result", "--no_result", dest="no_result", action="store_true",
                 help="with --train: print the result's headline only; write no file")
  args = p.parse_args()
  from bert_jax import hardware  # pylint: disable=g-import-not-at-top
  hardware.configure()  # as the CLIs: no TPU attempt (nor libtpu's lines) without a TPU
  if not args.train:
    config = load_config(args.config, args.data_dir, args.matmul_dtype)
    got = evaluate(config, args.workdir, args.batch_size)
    print(json.dumps({"params": got.pop("params"), "matmul_dtype": args.matmul_dtype, **got},
                     indent=1))
    return
  if not args.workdir:
    p.error("--train needs --workdir (a new one)")
  if args.matmul_dtype:
    p.error("--train scores the README's command as trained: no --matmul_dtype")
  if os.path.exists(args.workdir) and os.listdir(args.workdir):
    p.error(f"--train: {args.workdir} exists and is not empty; bert_jax.main would resume "
            "it, not train: remove it or name a new one")
  data_dir = os.path.expanduser(args.data_dir or load_config(args.config).data.data_dir)
  fresh = not (os.path.isdir(data_dir) and os.listdir(data_dir))
  load_before = results_io.load()
  train_s = train(args.config, args.workdir, args.data_dir)
  config = load_config(args.config, args.data_dir)
  before = evaluate(config, None, args.batch_size)
  after = evaluate(config, args.workdir, args.batch_size)
  print(json.dumps({"train_s": round(train_s, 1), "before": before, "after": after}, indent=1))
  command = f"python -m bert_jax.main --config {args.config} --workdir {args.workdir}" + (
      f" --config.data.data_dir={args.data_dir}" if args.data_dir else "")
  res = gpt_result(train_s, fresh, before, after, latest_step(args.workdir), command,
                   load_before)
  print(res["headline"])
  if not args.no_result:
    print("wrote", results_io.write(res, args.results_dir))


if __name__ == "__main__":
  main()
