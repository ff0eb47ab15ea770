"""Our pretraining train step against transformers' PyTorch BertForPreTraining and its
FlaxBertForPreTraining, same CPU, one run, repetitions interleaved.

  .venv-bench/bin/python bench/train_step/train_step.py --case all --steps 5 --reps 3

Result file: the full run (`--case all` with ours and torch among --systems) writes
bench/results/cpu_vs_pytorch-train_step.json (train_step_result.py: a figure a printed
row); any other run writes one only into `--results-dir DIR` (a smoke run: `--case tiny
--systems ours --results-dir /tmp/rs`); `--no-result` writes none.

Venvs: the driver runs in .venv-bench (ours + transformers' Flax models: see
bench/requirements-bench.txt; transformers 4.57 never goes into requirements.txt) and
runs bench/train_step/torch_worker.py with the reference venv's python (--torch-python,
default .venv-ref/bin/python of the main checkout: torch + transformers,
requirements-ref.txt), since our venvs hold no torch. The torch worker stays alive and
idle between its repetitions, so ours, torch and Flax alternate (ours, flax, torch, ours,
...) and a change of background load hits all three alike. Machine notes: run it on an
idle machine (the table prints the load average before and after; on a loaded 2-core box
the figures are meaningless), nothing else pinned; XLA uses every core this process may
run on, and torch gets as many threads (--threads).

Cases: `small` a 4-layer 256-wide BERT (bert/mini: 4 heads, mlp 1024, vocab 30522) at
seq 128 batch 32; `base` BERT-base at seq 128 batch 8; `compile` the lower + XLA-compile
time of our step for a 24-layer 256-wide model with and without scan over layers;
`tiny` (bert/tiny, batch 4, seq 32: a smoke test of the script, not in `all`).

What is compared. All three train BERT pretraining (MLM + NSP) in float32 on the same
batch (15% of the tokens masked, at most 20 predictions per row at seq 128, as
google-research/bert's create_pretraining_data) with the same optimizer: our
`optim.make_optimizer` (global-norm clip 1.0, AdamW b2 0.999 eps 1e-6 wd 0.01 off
LayerNorm/bias, linear warmup + decay), hidden dropout 0.1. Each starts from its own
random init (BERT's N(0, 0.02)-style init, not the same numbers): the driver checks that
the three first-step losses agree within 10% (about ln(vocab) + ln 2 at init), which
catches a system training a different problem (wrong labels, no masking, another loss).

* ours: `PretrainingTask` from a ConfigDict, state from `create_sharded_state` on a
  1-device mesh, `steps.train_step` jitted by train/loop.jit_steps (shardings, donation).
  scan_layers as the pretraining configs leave it (per platform: on CPU, unrolled up to
  12 layers; `--variants scan` times the scanned stack), no remat; vocabulary logits
  only at the masked positions.
* torch: transformers' `BertForPreTraining(BertConfig(...))` in train mode, its own loss
  (MLM cross-entropy over the labels != -100 + NSP), `torch.optim.AdamW` with the same
  hyper-parameters and decay mask, `clip_grad_norm_`, LambdaLR with the same schedule,
  `torch.set_num_threads(--threads)` (default: the cores XLA uses). Eager mode, as a
  plain transformers training loop runs.
* flax: the HF Flax pretraining step as run_mlm_flax.py wrote it: the model's
  `__call__` with all-position logits, MLM cross-entropy on one-hot labels over every
  position (labels -100 off the masked positions), plus NSP cross-entropy; a flax
  TrainState, `jax.jit(..., donate_argnums=0)`.

Dropout: hidden dropout 0.1 in all. Attention-probability dropout 0 in all by default,
because our fused attention (`jax.nn.dot_product_attention`) has no dropout and falls
back to the written-out path otherwise; `--attention-dropout 0.1` runs all at BERT's 0.1
(ours then takes the reference attention path).

MFU: model FLOPs over the measured f32 matmul peak (`metrics.measured_peak_flops`, the
best of several measurements through the run). The numerator is the same for every
system, `PretrainingTask.flops_per_example(seq, predictions)`: torch's and Flax's extra
vocabulary projections at unmasked positions are work the task does not need, so they do
not count. `own-FLOP util` also shows torch and Flax with their own FLOPs (logits at
every position: `flops_per_example(seq, seq)`), i.e. how busy they keep the cores.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/

try:
  import jax  # noqa: E402,F401  pylint: disable=unused-import
  import optax  # noqa: E402,F401  pylint: disable=unused-import
  import bert_jax.train.loop  # noqa: E402,F401  pylint: disable=unused-import
except ImportError as _e:
  print(f"train_step: error: {_e} in {sys.executable}: run the driver with "
        ".venv-bench/bin/python (bench/requirements-bench.txt)", file=sys.stderr)
  sys.exit(2)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bert_jax.tasks.pretraining import PretrainingTask  # noqa: E402
from bert_jax.train import mfu  # noqa: E402

import bench_util  # noqa: E402
import results_io  # noqa: E402
import train_step_result  # noqa: E402
from systems import build_ours, build_reference, hf_batch, make_batch, our_config  # noqa: E402

# train/loop.py enters the mesh with `with mesh:`; the bench does the same (not set_mesh).
warnings.filterwarnings("ignore", message=".*`with mesh:` context manager has been deprecated")

CASES = {  # name -> (variant, model overrides, batch, seq, max predictions)
    "small": ("bert/mini", {}, 32, 128, 20),
    "base": ("bert/base", {}, 8, 128, 20),
    "tiny": ("bert/tiny", {}, 4, 32, 5),  # smoke test of the script only
}
SYSTEMS = ("ours", "torch", "flax")
# Our step with one setting changed, for --variants (what limits us on this CPU).
VARIANTS = {
    "scan": dict(scan_layers=True),
    "unrolled": dict(scan_layers=False),
    "reference_attention": dict(attention_impl="reference"),
    "attention_dropout": dict(attention_dropout_rate=0.1),  # -> the written-out path
    "no_dropout": dict(dropout_rate=0.0),
    "remat_dots_no_batch": dict(remat_policy="dots_no_batch"),
}


# ----------------------------------------------------------------------------- timing
def run_steps(step, carry, batch, n: int):
  """(carry, loss, seconds per step) of n steps, synchronized at the end."""
  t0 = time.perf_counter()
  loss = None
  for _ in range(n):
    carry, loss = step(carry, batch)
  jax.block_until_ready((carry, loss))
  return carry, float(loss), (time.perf_counter() - t0) / n


class Peak:
  """The best of `measured_peak_flops` measurements taken between the timed repetitions."""

  def __init__(self):
    self.value = 0.0

  def measure(self):
    self.value = max(self.value, mfu.measured_peak_flops.__wrapped__("float32"))
    return self.value


MODEL_FIELDS = ("vocab_size", "hidden_size", "num_layers", "num_heads", "d_mlp", "max_len",
                "type_vocab_size", "layer_norm_eps", "init_std", "dropout_rate",
                "attention_dropout_rate")
TRAIN_FIELDS = ("learning_rate", "b1", "b2", "eps", "weight_decay", "warmup_steps",
                "num_steps", "grad_clip_norm")


def start_torch(model_cfg, config, host: dict, args, tmp: str):
  """(worker, its ready answer): bench/train_step/torch_worker.py on the same batch."""
  batch_path = os.path.join(tmp, "batch.npz")
  np.savez(batch_path, **hf_batch(host))
  spec = dict(batch=batch_path, threads=args.threads, warmup=args.warmup,
              model={k: getattr(model_cfg, k) for k in MODEL_FIELDS},
              train={k: config.train[k] for k in TRAIN_FIELDS})
  spec_path = os.path.join(tmp, "spec.json")
  with open(spec_path, "w", encoding="utf-8") as f:
    json.dump(spec, f)
  worker = bench_util.Worker(
      [args.torch_python, os.path.join(bench_util.BENCH_DIR, "train_step", "torch_worker.py"),
       "--spec", spec_path], "the torch worker (bench/train_step/torch_worker.py)")
  return worker, worker.read()


def in_process(step, carry, batch):
  """A timed(n) -> (loss, seconds per step) of a jitted step run in this process."""
  box = [carry]

  def timed(n: int):
    box[0], loss, dt = run_steps(step, box[0], batch, n)
    return loss, dt
  return timed


def check_first_losses(name: str, first_loss: dict) -> None:
  """Every system's first loss within 10% of ours: the same problem, not the same init."""
  ours = first_loss["ours"]
  off = {k: v for k, v in first_loss.items() if not abs(v - ours) <= 0.1 * abs(ours)}
  if off:
    raise bench_util.BenchError(
        f"{name}: first-step losses disagree: ours {ours:.3f}, " + ", ".join(
            f"{k} {v:.3f}" for k, v in off.items()) + " (more than 10% apart: not the "
        "same batch / labels / loss)")


def bench_case(name: str, args, peak: Peak, tmp: str) -> list[dict]:
  variant, overrides, batch, seq, preds = CASES[name]
  systems = {"ours": dict(overrides)} if "ours" in args.systems else {}
  for v in args.variants:
    systems[f"ours/{v}"] = dict(overrides, **VARIANTS[v])
  host = make_batch(batch, seq, preds, 30522)
  runners, first_loss, compile_s = {}, {}, {}
  cfg = our_config(variant, overrides, batch, seq, preds, args.attention_dropout)
  task = PretrainingTask(cfg)
  flops, own_ref_flops = task.flops_per_example(seq, preds), task.flops_per_example(seq, seq)
  for label, ov in systems.items():
    c = our_config(variant, ov, batch, seq, preds, args.attention_dropout)
    _, step, state, _ = build_ours(c)
    b = jax.device_put({k: jnp.asarray(v) for k, v in host.items()})
    runners[label] = in_process(step, state, b)
  if "flax" in args.systems:
    step, carry, _ = build_reference(task.model_config, cfg)
    runners["flax"] = in_process(step, carry, jax.device_put(
        {k: jnp.asarray(v) for k, v in hf_batch(host).items()}))
  for label, timed in runners.items():  # compile + warm up
    t0 = time.perf_counter()
    first_loss[label], _ = timed(1)
    compile_s[label] = time.perf_counter() - t0
    if args.warmup:
      timed(args.warmup)
  worker = None
  try:
    if "torch" in args.systems:  # built after ours/flax compiled: no overlap with them
      worker, ready = start_torch(task.model_config, cfg, host, args, tmp)
      first_loss["torch"], compile_s["torch"] = ready["first_loss"], ready["first_step_s"]
      print(f"{name}: torch worker: {ready['versions']}, {ready['threads']} threads",
            flush=True)
      runners["torch"] = lambda n: (lambda r: (r["loss"], r["step_s"]))(
          worker.ask(cmd="run", steps=n))
    if "ours" in first_loss:
      check_first_losses(name, first_loss)
    best = {}
    for _ in range(args.reps):  # interleaved, so every system sees the same background load
      peak.measure()
      for label, timed in runners.items():
        loss, dt = timed(args.steps)
        if not np.isfinite(loss):
          raise FloatingPointError(f"{name}/{label}: non-finite loss {loss}")
        best[label] = min(best.get(label, np.inf), dt)
  finally:
    if worker is not None:
      worker.close()
  peak.measure()
  rows = []
  for label in runners:
    dt = best[label]
    row = dict(case=name, system=label, batch=batch, seq=seq, step_s=dt, seq_per_s=batch / dt,
               first_loss=first_loss[label], first_step_s=compile_s[label],
               model_tflop_per_step=batch * flops / 1e12)
    row["mfu"] = batch * flops / dt / peak.value
    if label in ("torch", "flax"):
      row["own_flop_util"] = batch * own_ref_flops / dt / peak.value
    for ref in ("torch", "flax"):
      if ref in best:
        row[f"vs_{ref}"] = best[ref] / dt
    rows.append(row)
  return rows


def bench_compile(args) -> list[dict]:
  """Trace+lower and XLA compile seconds of our step, 24 layers of bert/mini, scan on/off."""
  rows = []
  for scan in (True, False):
    lower_s, compile_s = np.inf, np.inf
    for _ in range(args.compile_reps):  # a fresh task and jit each time: nothing cached
      cfg = our_config("bert/mini", dict(num_layers=24, scan_layers=scan), 32, 128, 20,
                       args.attention_dropout)
      task, _, state, (p_train, mesh) = build_ours(cfg)
      b = jax.device_put({k: jnp.asarray(v) for k, v in make_batch(32, 128, 20, 30522).items()})
      with mesh:
        t0 = time.perf_counter()
        lowered = p_train.lower(state, b)
        t1 = time.perf_counter()
        lowered.compile()
        t2 = time.perf_counter()
      lower_s, compile_s = min(lower_s, t1 - t0), min(compile_s, t2 - t1)
      del task, state, lowered
    rows.append(dict(case="compile", system=f"ours, 24 layers, scan_layers={scan}",
                     lower_s=lower_s, compile_s=compile_s, total_s=lower_s + compile_s))
  return rows


def print_rows(rows, peak: Peak):
  step_rows = [r for r in rows if r["case"] != "compile"]
  if step_rows:
    print(f"\nmeasured f32 matmul peak: {peak.value / 1e9:.1f} GFLOP/s "
          f"(best of {mfu.__name__}.measured_peak_flops over the run)")
    print(f"{'case':6} {'system':28} {'batch':>5} {'seq':>4} {'step s':>8} {'seq/s':>8} "
          f"{'vs torch':>8} {'vs flax':>7} {'MFU':>6} {'own-FLOP util':>13} "
          f"{'first loss':>10} {'1st step s':>10}")
    for r in step_rows:
      own = f"{r['own_flop_util']:.1%}" if "own_flop_util" in r else ""
      vs = {k: f"{r[f'vs_{k}']:.2f}x" if f"vs_{k}" in r else "" for k in ("torch", "flax")}
      print(f"{r['case']:6} {r['system']:28} {r['batch']:5d} {r['seq']:4d} {r['step_s']:8.3f} "
            f"{r['seq_per_s']:8.2f} {vs['torch']:>8} {vs['flax']:>7} {r['mfu']:6.1%} "
            f"{own:>13} {r['first_loss']:10.3f} {r['first_step_s']:10.1f}")
  comp = [r for r in rows if r["case"] == "compile"]
  if comp:
    print(f"\n{'compile (batch 32, seq 128)':40} {'lower s':>8} {'compile s':>9} {'total s':>8}")
    for r in comp:
      print(f"{r['system']:40} {r['lower_s']:8.1f} {r['compile_s']:9.1f} {r['total_s']:8.1f}")


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--case", choices=("small", "base", "compile", "tiny", "all"),
                      default="all", help="all = small, base, compile")
  parser.add_argument("--systems", default=",".join(SYSTEMS),
                      help=f"comma-separated subset of {','.join(SYSTEMS)}")
  parser.add_argument("--steps", type=int, default=5, help="timed steps per repetition")
  parser.add_argument("--reps", type=int, default=3, help="timed repetitions (best is kept)")
  parser.add_argument("--warmup", type=int, default=2, help="untimed steps after the first")
  parser.add_argument("--compile-reps", type=int, default=2)
  parser.add_argument("--attention-dropout", type=float, default=0.0,
                      help="attention-probability dropout of all systems (BERT: 0.1)")
  parser.add_argument("--variants", default="",
                      help=f"comma-separated extra runs of our step: {','.join(VARIANTS)}")
  parser.add_argument("--skip-reference", action="store_true",
                      help="drop transformers' Flax (as --systems without flax)")
  parser.add_argument("--torch-python", default=bench_util.default_python(".venv-ref"),
                      help="python of the venv with torch + transformers (requirements-ref.txt)")
  parser.add_argument("--threads", type=int, default=bench_util.xla_threads(),
                      help="torch.set_num_threads (default: the cores XLA uses here)")
  parser.add_argument("--results-dir", default=None,
                      help="write the result file here (default: bench/results/, and only "
                           "for the full run: --case all with ours and torch)")
  parser.add_argument("--no-result", action="store_true", help="write no result file")
  args = parser.parse_args()
  args.variants = [v for v in args.variants.split(",") if v]
  for v in args.variants:
    if v not in VARIANTS:
      parser.error(f"unknown variant {v!r}; known: {sorted(VARIANTS)}")
  args.systems = [x for x in args.systems.split(",") if x]
  for x in args.systems:
    if x not in SYSTEMS:
      parser.error(f"unknown system {x!r}; known: {','.join(SYSTEMS)}")
  if args.skip_reference and "flax" in args.systems:
    args.systems.remove("flax")
  if min(args.steps, args.reps, args.threads) < 1 or args.warmup < 0:
    parser.error("--steps, --reps and --threads must be >= 1, --warmup >= 0")
  return args


def check_systems(args) -> None:
  """One line, before any work, for a system that cannot run here."""
  if "torch" in args.systems:
    bench_util.check_python(args.torch_python, "--torch-python",
                            "the reference venv (requirements-ref.txt)")
  if "flax" in args.systems:
    try:
      import transformers  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      raise bench_util.BenchError(
          f"transformers is not installed in {sys.executable}: run the driver with "
          ".venv-bench/bin/python (bench/requirements-bench.txt) or pass --systems "
          "ours,torch") from None


def main():
  args = parse_args()
  load_before = results_io.load()
  bench_util.header("train_step")
  print(f"jax {jax.__version__} on {jax.devices()[0].device_kind} x{jax.device_count()}; "
        f"systems {','.join(args.systems)}; torch threads {args.threads}", flush=True)
  try:
    check_systems(args)
    peak = Peak()
    rows = []
    cases = ("small", "base", "compile") if args.case == "all" else (args.case,)
    with tempfile.TemporaryDirectory() as tmp:
      for case in cases:
        rows += bench_compile(args) if case == "compile" else bench_case(case, args, peak, tmp)
  except bench_util.BenchError as e:
    bench_util.fail("train_step", str(e))
  print_rows(rows, peak)
  print("\n" + bench_util.load_line("end"))
  full = args.case == "all" and {"ours", "torch"} <= set(args.systems)
  train_step_result.write(train_step_result.build(rows, peak.value, args, load_before, full),
                          args, full, "--case all with ours and torch")


if __name__ == "__main__":
  main()
