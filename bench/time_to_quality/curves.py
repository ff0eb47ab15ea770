"""Curves -> table, goals and picture for bench/time_to_quality/time_to_quality.py.

A curve is the list of a run's checkpoints, {"seconds": training clock, "accuracy": the
held-out scorer's top-1 accuracy, ...}, in clock order, starting at 0 s.
"""
from __future__ import annotations

from typing import Optional, Sequence

MARKS_S = (120.0, 240.0, 360.0)  # the 2, 4 and 6 minutes


def accuracy_at(curve: Sequence[dict], seconds: float) -> float:
  """The accuracy at `seconds` of training clock: linear between the checkpoints around
  it; past the last checkpoint (a run whose schedule ended earlier) its last accuracy."""
  prev = curve[0]
  for point in curve[1:]:
    if point["seconds"] >= seconds:
      span = point["seconds"] - prev["seconds"]
      f = (seconds - prev["seconds"]) / span if span > 0 else 1.0
      return prev["accuracy"] + f * (point["accuracy"] - prev["accuracy"])
    prev = point
  return prev["accuracy"]


def seconds_to_reach(curve: Sequence[dict], target: float) -> Optional[float]:
  """Training seconds at which the curve first reaches `target` (linear between the
  checkpoints around the crossing); None if it never does."""
  prev = curve[0]
  if prev["accuracy"] >= target:
    return prev["seconds"]
  for point in curve[1:]:
    if point["accuracy"] >= target:
      rise = point["accuracy"] - prev["accuracy"]
      f = (target - prev["accuracy"]) / rise if rise > 0 else 1.0
      return prev["seconds"] + f * (point["seconds"] - prev["seconds"])
    prev = point
  return None


def _minutes(seconds: Optional[float]) -> str:
  return "never" if seconds is None else f"{seconds / 60:.2f}"


def table(runs: dict, reference: str) -> list[str]:
  """Markdown rows: one per run (runs: name -> {"label", "curve", "summary"}); the last
  column is the minutes each needs to reach `reference`'s final accuracy."""
  target = runs[reference]["curve"][-1]["accuracy"]
  marks = " | ".join(f"acc @ {m / 60:.0f} min" for m in MARKS_S)
  lines = [f"| run | steps | clock (s) | tokens/s | {marks} | final acc | "
           f"min to {target:.4f} |",
           "|---|---:|---:|---:|" + "---:|" * len(MARKS_S) + "---:|---:|"]
  for run in runs.values():
    c, s = run["curve"], run["summary"]
    accs = " | ".join(f"{accuracy_at(c, m):.4f}" for m in MARKS_S)
    lines.append(f"| {run['label']} | {s['steps']} | {s['seconds']:.0f} | "
                 f"{s['steady_tokens_per_s']:,.0f} | {accs} | {c[-1]['accuracy']:.4f} | "
                 f"{_minutes(seconds_to_reach(c, target))} |")
  return lines


def goals(runs: dict, ratios: dict) -> list[str]:
  """The issue's goals, each `met` / `MISSED` with its figure."""
  tuned, demo = runs["hf_tuned"], runs["ours_demo"]
  target = tuned["curve"][-1]["accuracy"]
  reach = seconds_to_reach(demo["curve"], target)
  frac = None if reach is None else reach / tuned["summary"]["seconds"]
  times = demo["curve"][-1]["accuracy"] / max(target, 1e-9)
  verdict = lambda ok: "met" if ok else "MISSED"
  out = [f"- :demo reaches the tuned run's final accuracy {target:.4f} "
         + ("never" if frac is None else
            f"in {reach:.0f} s = {100 * frac:.0f}% of the tuned run's clock")
         + f" (goal <= 25%): {verdict(frac is not None and frac <= 0.25)}",
         f"- :demo's final accuracy / the tuned run's: {times:.2f}x (goal >= 3x): "
         f"{verdict(times >= 3)}"]
  for name, (ratio, goal) in ratios.items():
    out.append(f"- tokens/s, :bert / run_mlm defaults at {name}: {ratio:.2f}x "
               f"(goal >= {goal}x): {verdict(ratio >= goal)}")
  return out


def picture(runs: dict, path: str, title: str, marks: Sequence[float] = MARKS_S) -> None:
  """Held-out accuracy against training seconds, one curve per run, saved as PNG; a
  vertical line at each of `marks` (a shorter budget's own, so its axis is not stretched)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(8, 5.6), dpi=120)
  for name, run in runs.items():
    c = run["curve"]
    ax.plot([p["seconds"] for p in c], [p["accuracy"] for p in c], marker="o",
            markersize=3, label=run["label"],
            linestyle="--" if name.startswith("hf") else "-")  # transformers dashed
  target = runs["hf_tuned"]["curve"][-1]["accuracy"] if "hf_tuned" in runs else None
  if target is not None:
    ax.axhline(target, color="gray", linestyle=":", linewidth=1)
    ax.annotate("tuned transformers, final", (0, target), textcoords="offset points",
                xytext=(4, 4), color="gray", fontsize=8)
  for m in marks:
    ax.axvline(m, color="lightgray", linewidth=0.8, zorder=0)
  ax.set_xlabel("training wall clock (s), evaluation paused out")
  ax.set_ylabel("held-out masked-token accuracy (top-1)")
  ax.set_title(title, fontsize=10)
  ax.set_ylim(bottom=0)
  ax.set_xlim(left=0)
  ax.grid(alpha=0.3)
  ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=8)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)
