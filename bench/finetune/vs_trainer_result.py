"""bench/results/cpu_vs_pytorch-finetune.json from bench/finetune/vs_trainer.py's table
(vs_trainer.table: per system, medians over the seeds): a system's examples/s, its ratios
to the plain and the grouped Trainer, its held-out accuracy and its real tokens of the
computed positions. Data, no goal."""
from __future__ import annotations

import math

import results_io

BASES = {"trainer": "plain Trainer", "trainer group_by_length": "Trainer with group_by_length"}
NOTE = "data, no goal: CPU speed against PyTorch is no longer a project goal."
# The full run: the carried result's command (bench/results/cpu_vs_pytorch-finetune.json).
FULL = ("--dataset sources, float32, --systems with packed, trainer and trainer_grouped")


def is_full(args, systems) -> bool:
  return (args.dataset == "sources" and not args.bf16
          and {"packed", "trainer", "trainer_grouped"} <= set(systems))


def _figures(name: str, s: dict, table: dict, epochs: float) -> list:
  who = BASES.get(name, name)
  wall = f"whole process {s['wall']:.1f} s"
  if name not in BASES:
    wall += f", {s['compiles']} XLA compiles"
  if s.get("projected"):
    wall += f"; {s['projected']:.0f} s projected for {epochs:g} epochs"
  out = [results_io.figure(f"{who} examples/s", round(s["eps"], 2), "examples/s",
                           f"steady (steps 2..N); {wall}")]
  if name not in BASES:
    for b, label in BASES.items():
      if b in table:
        out.append(results_io.figure(
            f"{who} examples/s / {label}", round(s["eps"] / table[b]["eps"], 2), "x",
            f"steady rates; whole-process wall clock, theirs / ours: "
            f"{table[b]['wall'] / s['wall']:.2f}"))
  acc = [a for a in s["accuracy"] if math.isfinite(a)]
  if acc:  # the mean over the seeds
    out.append(results_io.figure(
        f"{who} held-out accuracy", round(sum(acc) / len(acc), 3), "",
        "seeds " + " ".join(f"{a:.3f}" for a in acc) if len(acc) > 1 else ""))
  out.append(results_io.figure(f"{who} real tokens of computed positions",
                               round(s["real"], 1), "%"))
  return out


def _mean_accuracy(s: dict) -> float:
  acc = [a for a in s["accuracy"] if math.isfinite(a)]
  return sum(acc) / len(acc) if acc else float("nan")


def headline(table: dict, lengths: list) -> str:
  """`packed 128: 2.10x the plain Trainer's examples/s; 0.95x the grouped Trainer's;
  accuracy 0.977 vs 0.975` (vs the plain Trainer's, else the grouped one's), for packed at
  the longest length (else our first system)."""
  ours = [k for k in table if k not in BASES]
  if not ours:
    return "; ".join(f"{BASES[k]} {s['eps']:.1f} examples/s" for k, s in table.items())
  name = f"packed {max(lengths)}" if f"packed {max(lengths)}" in ours else ours[0]
  s, parts = table[name], []
  if "trainer" in table:
    parts.append(f"{s['eps'] / table['trainer']['eps']:.2f}x the plain Trainer's examples/s")
  if "trainer group_by_length" in table:
    parts.append(f"{s['eps'] / table['trainer group_by_length']['eps']:.2f}x the grouped "
                 "Trainer's" + ("" if parts else " examples/s"))
  if not parts:
    parts.append(f"{s['eps']:.1f} examples/s")
  ref = table.get("trainer") or table.get("trainer group_by_length")
  if ref and math.isfinite(_mean_accuracy(s) + _mean_accuracy(ref)):
    parts.append(f"accuracy {_mean_accuracy(s):.3f} vs {_mean_accuracy(ref):.3f}")
  return f"{name}: " + "; ".join(parts)


def build(table: dict, args, seeds: list, sizes: tuple, load_before: float,
          full: bool) -> dict:
  figures = []
  for name, s in table.items():
    figures += _figures(name, s, table, args.project_epochs)
  notes = (f"{NOTE} The {args.dataset} set ({sizes[0]} train, {sizes[1]} held out), "
           f"{args.epochs:g} epochs, batch {args.batch} examples, lengths "
           f"{','.join(map(str, args.lengths))}, seeds {','.join(map(str, seeds))}, "
           f"{'bfloat16 products' if args.bf16 else 'float32'}"
           + (f"; torch {args.threads} threads" if set(BASES) & set(table) else "")
           + "; medians over the seeds.")
  if not full:
    notes += f" Not the full run ({FULL})."
  return results_io.result(
      "cpu_vs_pytorch", "Packed fine-tuning vs Trainer (CPU)", figures,
      "transformers' Trainer (DataCollatorWithPadding; group_by_length)",
      headline(table, args.lengths), case="finetune", goal_=None, load_before=load_before,
      notes=notes)


def write(res: dict, args, full: bool) -> None:
  """Into --results-dir when given; else into bench/results/ for the full run only."""
  if args.no_result or (args.results_dir is None and not full):
    why = "--no-result" if args.no_result else (
        f"not the full run ({FULL}); --results-dir DIR writes one")
    print(f"no result file: {why}")
    return
  print("wrote", results_io.write(res, args.results_dir or results_io.RESULTS_DIR))
