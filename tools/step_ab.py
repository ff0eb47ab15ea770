"""A change to one module against a commit's version of it, in one process: our
pretraining train step timed with the module's functions as they are and as they were,
interleaved, so both see the same machine state (this CPU drifts ~10% within an hour).

  .venv/bin/python tools/step_ab.py --at d1f6f0f --module bert_jax.train.losses \
      --names softmax_cross_entropy,correct_count [--config configs/bert_tiny.py:bert]
      [--sizes config] [--batch 32] [--rounds 20] [--steps 10]
      [--switch bert_jax.layers.cpu_threefry.use_unrolled] [--finetune 128]

Builds the step exactly as tools/pretrain_profile.py does (the config at its own sizes,
or BERT-base's with --sizes base; the loop's jitted step, one device), twice: once with
the named functions of --module as they were at --at (its source from `git show`,
loaded as a separate module), once as they are now. A function the step calls through
the module's attribute (`losses.softmax_cross_entropy(...)`), or through a name another
bert_jax module imported from it (`from bert_jax.layers.norm import layer_norm`), is
traced with whichever version is installed when the step first compiles. --switch names a function of one
bool that changes how later programs compile (a lowering rule): called with False
before the baseline is built and True before today's; with it, --at, --module and
--names may be left out. Then --rounds rounds of --steps
steps a side, alternating (--finetune LENGTH times tools/finetune_profile.py's packed
all-MiniLM-L6-v2 fine-tuning step at that row length instead of pretraining); prints each side's median and best ms a step, the median of
the rounds' new/old ratios, and the load before and after.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The root, bench/ (bench_util) and the suites whose parts the probes reuse.
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "bench")] + [
    os.path.join(_ROOT, "bench", d) for d in ("time_to_quality", "finetune", "inference")]


def module_at(commit: str, module: str):
  """`module` (dotted name) as its source was at `commit`, loaded under another name."""
  import bench_util
  path = module.replace(".", "/") + ".py"
  try:
    source = subprocess.run(["git", "-C", bench_util.ROOT, "show", f"{commit}:{path}"],
                            capture_output=True, text=True, check=True).stdout
  except subprocess.CalledProcessError as e:
    raise bench_util.BenchError(f"git show {commit}:{path}: {e.stderr.strip()}") from e
  with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
    f.write(source)
  name = f"{module}_at_{commit}"
  spec = importlib.util.spec_from_file_location(name, f.name)
  old = importlib.util.module_from_spec(spec)
  sys.modules[name] = old  # dataclasses (flax modules) look their module up while built
  spec.loader.exec_module(old)
  os.unlink(f.name)
  return old


def install(module, name: str, fn, versions) -> None:
  """Sets module.name = fn, and the same attribute of every loaded bert_jax module that
  imported it by name: those hold one of `versions` (modules imported during the first
  build bound the baseline's)."""
  setattr(module, name, fn)
  for m in list(sys.modules.values()):
    if getattr(m, "__name__", "").startswith("bert_jax.") and any(
        getattr(m, name, None) is f for f in versions):
      setattr(m, name, fn)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--at", help="the commit whose version is the baseline")
  p.add_argument("--module")
  p.add_argument("--names", help="comma-separated functions to swap")
  p.add_argument("--switch", help="module.function(enabled: bool), False for the baseline")
  p.add_argument("--config", default="configs/bert_tiny.py:bert")
  p.add_argument("--sizes", choices=("base", "config"), default="config")
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--rounds", type=int, default=20)
  p.add_argument("--steps", type=int, default=10)
  p.add_argument("--data_dir", default="~/bert_jax_data")
  p.add_argument("--finetune", type=int, metavar="LENGTH",
                 help="time the packed fine-tuning step (tools/finetune_profile.py) instead")
  args = p.parse_args()
  swap = (args.at, args.module, args.names)
  if any(swap) and not all(swap) or not any(swap) and not args.switch:
    p.error("give --at, --module and --names together, and/or --switch")
  import bench_util
  try:
    run(args)
  except bench_util.BenchError as e:
    bench_util.fail("step_ab", str(e))


def run(args) -> None:
  import bench_util
  import jax
  import pretrain_profile
  import ours_worker as ttq_ours_worker  # noqa: F401  pylint: disable=unused-import  (settles the platform)
  bench_util.header("step_ab")
  module, names, versions = None, [], {"before": [], "now": []}
  if args.module:
    module = importlib.import_module(args.module)
    names = args.names.split(",")
    old = module_at(args.at, args.module)
    missing = [n for n in names if not hasattr(old, n) or not hasattr(module, n)]
    if missing:
      raise bench_util.BenchError(
          f"{args.module} has no {', '.join(missing)} (now or at {args.at})")
    versions = {"before": [getattr(old, n) for n in names],
                "now": [getattr(module, n) for n in names]}
  switch = None
  if args.switch:
    where, _, name = args.switch.rpartition(".")
    switch = getattr(importlib.import_module(where), name, None)
    if switch is None:
      raise bench_util.BenchError(f"--switch {args.switch}: no such function")
  before = " and ".join(([f"at {args.at}"] if args.module else []) +
                        ([f"{args.switch}(False)"] if switch else []))
  steps = {}
  for label, fns in versions.items():
    for i, (n, fn) in enumerate(zip(names, fns)):
      install(module, n, fn, (versions["before"][i], versions["now"][i]))
    if switch is not None:
      switch(label == "now")
    label = before if label == "before" else "now"
    if args.finetune:
      import finetune_profile
      tmp = tempfile.mkdtemp(prefix="step_ab_")
      step, _ = finetune_profile.build(
          argparse.Namespace(length=args.finetune, variant="default"), tmp)
    else:
      step, _ = pretrain_profile.build(args)
    for _ in range(3):  # compiles with this version installed, then warms up
      jax.block_until_ready(step())
    steps[label] = step
  times = {label: [] for label in steps}
  for _ in range(args.rounds):
    for label, step in steps.items():
      start = time.perf_counter()
      for _ in range(args.steps):
        out = step()
      jax.block_until_ready(out)
      times[label].append(1e3 * (time.perf_counter() - start) / args.steps)
  (old_label, old_ms), (new_label, new_ms) = times.items()
  for label, ms in times.items():
    print(f"{label}: median {statistics.median(ms):.1f} ms a step, best {min(ms):.1f} "
          f"({args.rounds} rounds of {args.steps} steps)")
  ratio = statistics.median(n / o for n, o in zip(new_ms, old_ms))
  print(f"{new_label} / {old_label}: median of the rounds' ratios {ratio:.3f}")
  print(bench_util.load_line("end"))


if __name__ == "__main__":
  main()
