"""The TPU compiler's estimate of our BERT train step beside transformers'
FlaxBertForPreTraining, both compiled ahead of time for the same topology (libtpu, no
TPU), written to bench/results/tpu_cost-<case>.json.

  .venv-bench/bin/python bench/aot/tpu_cost.py --cases base_s128_b256,base_s128_b1024

(.venv-bench: bench/requirements-bench.txt, with libtpu and transformers' Flax BERT.)
Per case (model, sequence length, global batch, topology), three systems, all bf16 with
BERT's dropout 0.1 on the hidden states and the attention probabilities:

* ours: the config (configs/bert_base.py, configs/bert_large.py) at its defaults for that
  phase: its remat policy, mesh and layer layout (unrolled up to 12 layers), the
  attention path "auto" picks;
* ours_reference: ours with attention_impl "reference", the written-out attention (scores,
  softmax and the dropout mask in HBM) that ran before kernels/flash_dropout.py: the
  fused kernel's effect (where it does not fit at our defaults, both are compiled again
  at remat full, ours_remat_full and ours_reference_remat_full, for that comparison);
* ours_like: the same as ours with no remat and plain data parallelism (mesh -1,1,1), the
  setting Flax BERT runs in: the like-for-like comparison (ours itself where the defaults
  are that already);
* theirs: FlaxBertForPreTraining as bench/aot/vs_flaxbert.py builds it (run_mlm_flax's
  step: MLM loss over every position's logits, NSP, optax AdamW), no gradient
  checkpointing, data parallel: its own default, so both like-for-like and at its best
  (theirs_remat, with gradient checkpointing, only where that does not fit).

The estimate is aot/cost.py's (`optimal_seconds` of the unrolled program, sliced
prefetch kept whole); est. MFU uses one formula for both sides, 6 N T + 12 L S d T with
our parameter count. Goals (issue 65): ours ≥ 1.3x faster than theirs at every case;
est. MFU ≥ 55% for BERT-base S128 at 1,024 rows on v5e:2x2 and ≥ 50% for BERT-large S512
on v5e:4x4.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ROOT = os.path.dirname(_BENCH)
sys.path[:0] = [_ROOT, _BENCH, os.path.join(_BENCH, "aot")]

from bert_jax import hardware  # noqa: E402

hardware.configure()  # an entry point: the platform settled as the CLIs settle it
from bert_jax.aot import compile as compile_lib  # noqa: E402
from bert_jax.aot import cost as cost_lib, report as report_lib  # noqa: E402
from bert_jax.aot.check import check  # noqa: E402
from bert_jax.hardware import chips  # noqa: E402
import results_io  # noqa: E402
import vs_flaxbert  # noqa: E402  (bench/aot/)

# case: (config file, Flax BERT size, seq, predictions per row, global batch, topology)
CASES = {
    "base_s128_b256": ("configs/bert_base.py", "base", 128, 20, 256, "v5e:2x2"),
    "base_s128_b1024": ("configs/bert_base.py", "base", 128, 20, 1024, "v5e:2x2"),
    "large_s512_b256": ("configs/bert_large.py", "large", 512, 80, 256, "v5e:4x4"),
    "base_s128_b1024_v5p": ("configs/bert_base.py", "base", 128, 20, 1024, "v5p:2x2x1"),
    "base_s128_b1024_v6e": ("configs/bert_base.py", "base", 128, 20, 1024, "v6e:2x2"),
}
# (case, minimum est. MFU of ours at its defaults)
MFU_GOALS = {"base_s128_b1024": 0.55, "large_s512_b256": 0.50}
SPEEDUP_GOAL = 1.3


def our_config(path: str, seq: int, predictions: int, batch: int, like: bool,
               attention: str = "", remat: str = ""):
  """The config's phase at `seq` as the only phase; `like`: no remat, data parallel;
  attention: model.attention_impl, remat: its remat policy ("" keeps the config's)."""
  spec = importlib.util.spec_from_file_location("cfg", os.path.join(_ROOT, path))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  c = module.get_config()
  phase = next(dict(p) for p in c.train.phases if p["max_seq_length"] == seq)
  phase.update(fraction=1.0, max_predictions_per_seq=predictions)
  if like:
    phase["remat_policy"] = "none"
    c.model.remat_policy = "none"
    c.mesh_shape = (-1, 1, 1)
  if attention:
    c.model.attention_impl = attention
  if remat:
    phase["remat_policy"] = c.model.remat_policy = remat
  c.train.phases = (phase,)
  c.train.batch_size = batch
  return c


def ours(case: str, like: bool, attention: str = "", remat: str = "") -> dict:
  path, _, seq, predictions, batch, topology = CASES[case]
  try:
    r = check(our_config(path, seq, predictions, batch, like, attention, remat), topology,
              steps=("train",))
  except report_lib.DoesNotFitError as e:
    r = e.report
  step = r["steps"][0]
  return {"fits": step["fits"], "hbm_gib": step["hbm"]["total"] / 2 ** 30
          if step.get("hbm") else None, "cost": step.get("cost"),
          "cost_note": step.get("cost_note", ""),
          "remat": step["remat_policy"], "mesh": r["mesh"],
          "num_params": r["state"]["num_params"], "compile_seconds": step["compile_seconds"],
          "error": step.get("error", "")}


def theirs(case: str, remat: bool, num_params: int) -> dict:
  _, size, seq, _, batch, topology = CASES[case]
  chip, devices = chips.topology_devices(topology)
  t0 = time.perf_counter()
  try:
    compiled = vs_flaxbert.theirs_lowered(topology, seq, batch, remat, size).compile(
        cost_lib.COST_COMPILER_OPTIONS)
  except Exception as e:  # pylint: disable=broad-except
    if not compile_lib.is_out_of_memory(e):
      raise
    return {"fits": False, "hbm_gib": None, "cost": None, "error": str(e).splitlines()[0]}
  # Its memory is that of this compile (sliced prefetch kept whole), not a second one with
  # the compiler's defaults as ours has: the prefetch setting moves no activations.
  mem = report_lib.memory(compiled)
  cfg = vs_flaxbert.SIZES[size]
  tokens = batch * seq
  flops = cost_lib.model_flops(num_params, cfg["num_hidden_layers"], seq, cfg["hidden_size"],
                               tokens)
  try:
    est = cost_lib.estimate(cost_lib.compiler_cost(compiled), flops, tokens, len(devices),
                            chip.peak_bf16_flops)
  except ValueError as e:  # a time the compiler did not count
    est = None
    note = str(e)
  else:
    note = ""
  return {"fits": mem["total"] <= chip.hbm_bytes, "hbm_gib": mem["total"] / 2 ** 30,
          "cost": est, "cost_note": note, "remat": "full" if remat else "none",
          "mesh": {"data": len(devices)},
          "compile_seconds": round(time.perf_counter() - t0, 1), "error": ""}


SYSTEMS = ("ours", "ours_like", "ours_reference", "theirs")


def run_case(case: str, systems=SYSTEMS) -> dict:
  rows = {"ours": ours(case, like=False)}
  if "ours_like" in systems:
    mesh = rows["ours"]["mesh"]
    same = rows["ours"]["remat"] == "none" and mesh.get("fsdp") == mesh.get("tensor") == 1
    rows["ours_like"] = dict(rows["ours"]) if same else ours(case, like=True)
  if "ours_reference" in systems:
    rows["ours_reference"] = ours(case, like=False, attention="reference")
    if not rows["ours_reference"]["fits"]:  # compare the two where both fit
      rows["ours_remat_full"] = ours(case, like=False, remat="full")
      rows["ours_reference_remat_full"] = ours(case, like=False, attention="reference",
                                               remat="full")
  n = rows["ours"]["num_params"]
  rows["theirs"] = theirs(case, remat=False, num_params=n)
  if not rows["theirs"]["fits"]:
    rows["theirs_remat"] = theirs(case, remat=True, num_params=n)
  for system, r in rows.items():
    print(json.dumps({"case": case, "system": system, **r}, default=str), flush=True)
  return rows


def _seconds(r: dict):
  return r["cost"]["optimal_seconds"] if r.get("fits") and r.get("cost") else None


def case_result(case: str, rows: dict, load_before: float) -> dict:
  path, size, seq, _, batch, topology = CASES[case]
  figures = []
  for system, r in rows.items():
    what = f"{system} (remat {r.get('remat')}, mesh {r.get('mesh')})"
    if not r["fits"]:
      figures.append(results_io.figure(f"{what}: does not fit", 0, "", r["error"][:200]))
      continue
    if not r.get("cost"):
      figures.append(results_io.figure(f"{what}: fits, estimate unknown", 0, "",
                                       r.get("cost_note", "")[:200]))
      continue
    c = r["cost"]
    figures.append(results_io.figure(
        what, f"{1e3 * c['optimal_seconds']:.1f} ms, est. MFU {100 * c['est_mfu']:.1f}%",
        "", f"{c['bytes_per_chip'] / 1e9:.1f} GB per chip counted; HBM "
            f"{r['hbm_gib']:.2f} GiB per chip"))
  best_theirs = _seconds(rows["theirs"]) or _seconds(rows.get("theirs_remat", {}))
  speed = {k: best_theirs / _seconds(rows[k]) if best_theirs and _seconds(rows[k]) else None
           for k in ("ours", "ours_like") if k in rows}
  for k, v in speed.items():
    if v:
      figures.append(results_io.figure(f"Flax BERT / {k}: est. step", round(v, 2), "x"))
  fused, written = (("ours_remat_full", "ours_reference_remat_full")
                    if "ours_remat_full" in rows else ("ours", "ours_reference"))
  if _seconds(rows[fused]) and _seconds(rows.get(written, {})):
    figures.append(results_io.figure(
        "fused attention dropout / written-out: est. step",
        round(_seconds(rows[fused]) / _seconds(rows[written]), 3), "x",
        "kernels/flash_dropout.py against attention_impl=reference, both at "
        + ("remat full (written-out does not fit at our defaults)" if fused != "ours"
           else "our defaults")))
  mfu_goal = MFU_GOALS.get(case)
  ours_mfu = rows["ours"]["cost"]["est_mfu"] if _seconds(rows["ours"]) else 0.0
  met = bool(speed["ours"] and speed["ours"] >= SPEEDUP_GOAL
             and (mfu_goal is None or ours_mfu >= mfu_goal))
  threshold = f">= {SPEEDUP_GOAL}x faster than Flax BERT" + (
      f"; est. MFU >= {100 * mfu_goal:.0f}%" if mfu_goal else "")
  name = f"BERT-{size} S{seq}, {batch} rows, {topology}"
  like = _seconds(rows.get("ours_like", {}))  # not run: --systems without ours_like
  headline = (f"ours {1e3 * (_seconds(rows['ours']) or 0):.1f} ms "
              f"({100 * ours_mfu:.0f}% est. MFU), "
              + (f"like-for-like {1e3 * like:.1f} ms, " if like else "")
              + f"Flax BERT {1e3 * (best_theirs or 0):.1f} ms")
  notes = ("The TPU compiler's cost model (optimal_seconds), not a measured time: "
           f"libtpu {_libtpu_version()}, layers unrolled for the cost, "
           f"{_prefetch_option()}. Compiled here without a TPU.")
  return results_io.result(
      "tpu_cost", f"TPU cost model: {name}, ours vs FlaxBertForPreTraining", figures,
      "transformers' FlaxBertForPreTraining, same topology, shapes, dtype and dropout",
      headline, case=case, goal_=results_io.goal("the compiler's step estimate", threshold,
                                                  met),
      load_before=load_before, notes=notes) | {"hardware": f"AOT, {topology} (libtpu on a "
                                                            "CPU host)", "config": path}


def _prefetch_option() -> str:
  return ", ".join(f"{k}={v}" for k, v in cost_lib.COST_COMPILER_OPTIONS.items())


def _libtpu_version() -> str:
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  try:
    return metadata.version("libtpu")
  except metadata.PackageNotFoundError:
    return "unknown"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--systems", default=",".join(SYSTEMS),
                 help="of ours (always), ours_like, ours_reference, theirs (always)")
  args, cases = results_io.parse_cases(p, CASES, argv)
  for case in cases:
    try:
      chips.topology_devices(CASES[case][5])
    except ValueError as e:  # a topology this libtpu does not know: say so, go on
      print(json.dumps({"case": case, "skipped": str(e)}), flush=True)
      continue
    load_before = results_io.load()
    rows = run_case(case, args.systems.split(","))
    if not args.no_result:
      print("wrote", results_io.write(case_result(case, rows, load_before), args.results_dir))
  return 0


if __name__ == "__main__":
  sys.exit(main())
