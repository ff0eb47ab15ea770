"""ModernBERT-base's train step compiled for TPU topologies (libtpu AOT, no TPU): HBM per
chip, the largest global batch that fits, compile time, and which attention kernel each
layer takes. Writes bench/results/aot_modernbert-<case>.json.

  python bench/aot/modernbert.py [--cases base_s1024_v5e,...]

Each case is configs/modernbert.py:base at one sequence length (one phase), data
parallel over the topology's chips, at a remat policy. The largest batch: a first
compile at a small batch gives HBM per row; the largest power of two (rows per step)
that this predicts to fit is compiled, then twice it, and the search halves or doubles
until it has a batch that fits and its double that does not. HBM only grows with the
batch, so that is the largest power of two that fits.
"""
from __future__ import annotations

import argparse
import os
import sys

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ROOT = os.path.dirname(_BENCH)
sys.path[:0] = [_ROOT, _BENCH]

from bert_jax import hardware  # noqa: E402

hardware.configure()  # an entry point: the platform settled as the CLIs settle it
from bert_jax.aot import compile as compile_lib, report as report_lib  # noqa: E402
from bert_jax.hardware import chips  # noqa: E402
from bert_jax.kernels import splash  # noqa: E402
from bert_jax.tasks import registry  # noqa: E402
from bert_jax.train import defaults  # noqa: E402
import results_io  # noqa: E402

GIB = 2 ** 30
KINDS_NOTE = ("8 global and 14 local layers: each kernel's forward and backward, and with "
              "remat full its recomputed forward")
# case -> (sequence length, topology, remat policy, first batch)
CASES = {
    "base_s1024_v5e": (1024, "v5e:2x2", "none", 32),
    "base_s8192_v5e": (8192, "v5e:2x2", "none", 4),
    "base_s8192_v5e_full": (8192, "v5e:2x2", "full", 4),
    "base_s1024_v5p": (1024, "v5p:2x2x1", "none", 32),
    "base_s8192_v5p": (8192, "v5p:2x2x1", "none", 4),
}


def case_config(seq: int, remat: str, batch: int):
  from configs import modernbert  # pylint: disable=g-import-not-at-top
  config = modernbert.get_config("base")
  config.train.phases = ()
  config.data.max_seq_length = seq
  config.data.max_predictions_per_seq = -(-3 * seq // 10)   # 30% masking
  config.model.remat_policy = remat
  config.train.batch_size = batch
  defaults.resolve_platform(config, "tpu")
  return config


def _compile(setup, batch: int):
  step = compile_lib.compile_step(setup, "train", {}, batch)
  return step, (report_lib.memory(step.compiled) if step.compiled is not None else None)


def search(setup, first: int, capacity: int, chips_n: int) -> dict:
  """{batch: (step, memory or None)} of the compiles the search made (module docstring)."""
  tried = {first: _compile(setup, first)}
  mem = tried[first][1]
  if mem is None:
    batch = first
  else:  # HBM per row at the first batch: all of it but the arguments' and the program's
    fixed = mem["arguments"] + mem["outputs"] - mem["aliased"] + mem["program"]
    per_row = max(mem["temporaries"], 1) / first
    batch = first
    while batch * 2 * per_row + fixed <= capacity:
      batch *= 2
  while True:
    if batch not in tried:
      tried[batch] = _compile(setup, batch)
    fits = tried[batch][1] is not None
    if fits and 2 * batch in tried and tried[2 * batch][1] is None:
      return tried
    if not fits and batch // 2 in tried and tried[batch // 2][1] is not None:
      return tried
    if not fits and batch // 2 < chips_n:
      return tried            # not even one row per chip fits
    batch = 2 * batch if fits else batch // 2


def run_case(case: str) -> dict:
  seq, topology, remat, first = CASES[case]
  load_before = results_io.load()
  config = case_config(seq, remat, first)
  chip, devices = chips.topology_devices(topology)
  capacity = int(chip.hbm_bytes)
  setup = compile_lib.setup(config, topology, registry.get_task(config))
  tried = search(setup, first, capacity, len(devices))
  fitting = sorted(b for b, (_, m) in tried.items() if m is not None)
  if not fitting:
    raise SystemExit(f"{case}: not one row per chip fits on {topology}")
  best = fitting[-1]
  step, mem = tried[best]
  kinds = splash.splash_windows_in_hlo(step.hlo_text) if step.hlo_text else None
  figures = [
      results_io.figure("largest global batch that fits (power of two)", best, "rows"),
      results_io.figure("HBM per chip at that batch", round(mem["total"] / GIB, 2), "GiB",
                        f"of {capacity / GIB:.0f}; temporaries "
                        f"{mem['temporaries'] / GIB:.2f} GiB"),
      results_io.figure("tokens per step at that batch", best * seq, "tokens"),
      results_io.figure("compile time at that batch", round(step.seconds, 1), "s",
                        "lower + compile, on this machine"),
      results_io.figure("splash kernel calls, global / local window 64",
                        f"{kinds.get(0, 0)} / {kinds.get(64, 0)}" if kinds is not None
                        else "unknown", "", KINDS_NOTE if kinds is not None else
                        f"XLA could not print this program's HLO: {step.hlo_error[:120]}"),
  ]
  for b in sorted(tried):
    m = tried[b][1]
    figures.append(results_io.figure(
        f"HBM per chip at {b} rows", round(m["total"] / GIB, 2) if m else "does not fit",
        "GiB" if m else "", f"compile {tried[b][0].seconds:.0f} s"))
  name = f"ModernBERT-base S{seq}, remat {remat}, {topology}"
  return results_io.result(
      "aot_modernbert", f"AOT {name}", figures,
      "the chip's HBM (the TPU compiler's memory plan)",
      f"{best} rows ({best * seq:,} tokens) per step fit in {mem['total'] / GIB:.2f} GiB "
      f"per chip; compiled in {step.seconds:.0f} s", case=case, load_before=load_before,
      notes=("configs/modernbert.py:base, one phase at this length, data parallel, bf16, "
             "30% masking; the compiler's memory plan from libtpu, compiled here without a "
             "TPU. Local layers run splash's local-window kernel (the HLO's op names)."))


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  args, cases = results_io.parse_cases(p, CASES, argv)
  for case in cases:
    res = run_case(case)
    print(res["title"], "|", res["headline"], flush=True)
    if not args.no_result:
      print("wrote", results_io.write(res, args.results_dir), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
