"""bench/results/cpu_vs_pytorch-train_step.json from bench/train_step/train_step.py's rows:
one figure per row of its printed table (ratios to transformers' PyTorch and Flax steps,
seq/s, MFU, compile seconds) and the measured matmul peak. Data, no goal."""
from __future__ import annotations

import results_io

MODELS = {"small": "BERT-mini", "base": "BERT-base", "tiny": "BERT-tiny"}
NAMES = {"torch": "BertForPreTraining", "flax": "FlaxBertForPreTraining"}
NOTE = "data, no goal: CPU speed against PyTorch is no longer a project goal."


def _step_figures(r: dict) -> list:
  model = MODELS.get(r["case"], r["case"])
  who = NAMES.get(r["system"], r["system"])
  prefix = f"{model} {who}"
  shape = f"batch {r['batch']}, seq {r['seq']}: {r['step_s']:.3f} s a step"
  first = f"first step {r['first_step_s']:.1f} s (compile included), loss {r['first_loss']:.3f}"
  out = []
  for ref in ("torch", "flax"):  # torch's ratio to Flax: the inverse of Flax's to torch
    if f"vs_{ref}" in r and r["system"] not in (ref, "torch"):
      out.append(results_io.figure(f"{prefix} speed / {NAMES[ref]}", round(r[f"vs_{ref}"], 2),
                                   "x", f"{NAMES[ref]}'s step time over this one's"))
  if r["system"] in NAMES:  # a reference: its rate, its utilization in the note
    out.append(results_io.figure(
        f"{prefix} seq/s", round(r["seq_per_s"], 2), "seq/s",
        f"{shape}; MFU {r['mfu']:.1%}, own-FLOP util {r['own_flop_util']:.1%}; {first}"))
  else:
    out.append(results_io.figure(f"{prefix} seq/s", round(r["seq_per_s"], 2), "seq/s",
                                 f"{shape}; {first}"))
    out.append(results_io.figure(f"{prefix} MFU", round(100 * r["mfu"], 1), "%",
                                 "the task's model FLOPs over the measured f32 matmul peak"))
  return out


def headline(rows: list) -> str:
  """`mini 2.63x; base 1.19x PyTorch; base MFU 68.5%` from our plain step's rows."""
  ours = [r for r in rows if r["system"] == "ours" and r["case"] != "compile"]
  short = lambda r: MODELS.get(r["case"], r["case"]).replace("BERT-", "")  # noqa: E731
  vs = [f"{short(r)} {r['vs_torch']:.2f}x" for r in ours if "vs_torch" in r]
  parts = ["; ".join(vs) + " PyTorch"] if vs else [
      f"{short(r)} {r['seq_per_s']:.1f} seq/s" for r in ours]
  if ours:
    parts.append(f"{short(ours[-1])} MFU {ours[-1]['mfu']:.1%}")
  comp = {("True" in r["system"]): r["total_s"] for r in rows if r["case"] == "compile"}
  if len(comp) == 2:
    parts.append(f"24-layer compile {comp[True]:.0f} s scanned, {comp[False]:.0f} s unrolled")
  return "; ".join(parts) or "no step of ours measured"


def build(rows: list, peak_flops: float, args, load_before: float, full: bool) -> dict:
  figures = []
  for r in rows:
    if r["case"] == "compile":
      figures.append(results_io.figure(
          f"lower + compile, {r['system']}", round(r["total_s"], 1), "s",
          f"lower {r['lower_s']:.1f} s + XLA compile {r['compile_s']:.1f} s; BERT-mini "
          f"widths, batch 32, seq 128; best of {args.compile_reps}"))
    else:
      figures += _step_figures(r)
  if any(r["case"] != "compile" for r in rows):
    figures.append(results_io.figure("measured f32 matmul peak", round(peak_flops / 1e9, 1),
                                     "GFLOP/s", "MFU's denominator: the best measurement "
                                     "of the run"))
  notes = (f"{NOTE} Best of {args.reps} repetitions of {args.steps} timed steps, the systems "
           f"interleaved; torch {args.threads} threads; attention dropout "
           f"{args.attention_dropout:g}.")
  if not full:
    notes += (f" Not the full run (--case all with ours and torch): --case {args.case}, "
              f"systems {','.join(args.systems)}.")
  return results_io.result(
      "cpu_vs_pytorch", "Train step vs PyTorch (CPU)", figures,
      "transformers' PyTorch BertForPreTraining and FlaxBertForPreTraining", headline(rows),
      case="train_step", goal_=None, load_before=load_before, notes=notes)


def write(res: dict, args, full: bool, full_run: str) -> None:
  """Into --results-dir when given; else into bench/results/ for the full run only."""
  if args.no_result or (args.results_dir is None and not full):
    why = "--no-result" if args.no_result else (
        f"not the full run ({full_run}); --results-dir DIR writes one")
    print(f"no result file: {why}")
    return
  print("wrote", results_io.write(res, args.results_dir or results_io.RESULTS_DIR))
