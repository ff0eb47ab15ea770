"""`launch/sweep.py --aot`: every point of a sweep compiled for a TPU topology, as a table.

Nothing runs: each point's train step goes through bert_jax/aot (the TPU compiler from
libtpu, no TPU), and the table says per chip what fits, its HBM, temporaries, collectives,
roofline and the compiler's estimate of the step time, then the largest global batch that
fits per (mesh, remat) strategy and the point that fits with the highest estimated
throughput: the remat policy and mesh to train with, chosen from the AOT figures. Rows
can be kept in a jsonl file as they come, so a stopped sweep resumes.
"""
from __future__ import annotations

import json
import os
import re
import sys

import sweep_points as points


def aot_rows(config_path: str, topology: str, extra: list[str], jsonl: str = "",
             where: tuple[str, ...] = ()) -> list[dict]:
  """Compiles every sweep point's train step for `topology`; one result row per point.

  A point whose strategy already failed to fit at a smaller global batch is not compiled
  (its row says so): HBM per chip only grows with the batch. With `jsonl`, each row is
  appended to that file as soon as it is known (a sweep of hours keeps what it did), and
  a point that file already holds for the same topology and --config.x flags is taken
  from it instead of compiled again: a stopped sweep, rerun, resumes where it stopped."""
  from bert_jax.hardware import chips  # pylint: disable=g-import-not-at-top
  from bert_jax.aot import check as check_lib, report as report_lib  # pylint: disable=g-import-not-at-top
  chips.parse_topology(topology)  # an unknown name: one error, not one per point
  sweep = points.load_sweep(config_path, extra)
  rows = []
  too_big = {}  # strategy (the overrides but the batch) -> smallest batch that did not fit
  done = _compiled_rows(jsonl, topology, extra)
  for overrides in points.select(sweep, list(where)):
    strategy, batch = points.strategy(overrides), overrides.get(points.BATCH_KEY)
    row = done.get(_point_key(overrides))
    if row is not None:
      row = dict(row, overrides=overrides)
      rows.append(row)
      if not row["fits"] and batch is not None:
        too_big[strategy] = min(too_big.get(strategy, batch), batch)
      print(f"# {points.run_name(overrides)}: fits={row['fits']} (from {jsonl})",
            file=sys.stderr, flush=True)
      continue
    if batch is not None and too_big.get(strategy, batch + 1) <= batch:
      # Memory grows with the batch: a larger one cannot fit where a smaller one did not.
      row = {"overrides": overrides, "fits": False, "skipped": True,
             "error": f"not compiled: batch {too_big[strategy]} already does not fit"}
      _keep(rows, row, jsonl)
      print(f"# {points.run_name(overrides)}: {row['error']}", file=sys.stderr, flush=True)
      continue
    arg = config_path.split(":", 1)[1] if ":" in config_path else None
    config = points.load_module(config_path).get_config(arg)
    config.lock()
    for flag in extra:
      key, _, value = flag[2:].partition("=")
      points.set_key(config, key, points.literal(value))
    for key, value in overrides.items():
      points.set_key(config, key, value)
    row = {"overrides": overrides, "topology": topology, "extra": list(extra)}
    try:
      report = check_lib.check(config, topology, steps=("train",), config_name=config_path)
    except report_lib.DoesNotFitError as e:
      report = e.report
      row["error"] = next(r["error"] for r in report["steps"] if not r["fits"])
    except (ValueError, NotImplementedError) as e:  # e.g. a batch that does not divide
      row.update(fits=None, error=str(e))
      _keep(rows, row, jsonl)
      print(f"# {points.run_name(overrides)}: {e}", file=sys.stderr, flush=True)
      continue
    worst = max(report["steps"], key=lambda r: r.get("hbm", {}).get("total", float("inf")))
    row.update(fits=report["fits"], mesh=report["mesh"], hbm=worst.get("hbm"),
               compile_seconds=sum(r["compile_seconds"] for r in report["steps"]),
               roofline=worst.get("roofline"), chip=report["chip"],
               collectives=worst.get("collectives"), cost=_estimate(worst.get("cost")))
    _keep(rows, row, jsonl)
    if not row["fits"] and batch is not None:
      too_big[strategy] = min(too_big.get(strategy, batch), batch)
    print(f"# {points.run_name(overrides)}: fits={row['fits']} "
          + (f"{row['hbm']['total'] / 2 ** 30:.2f} GiB" if row["hbm"] else row["error"]),
          file=sys.stderr, flush=True)
  return rows


def _point_key(overrides: dict) -> str:
  return json.dumps(overrides, sort_keys=True)  # tuples and their JSON lists agree


def _compiled_rows(jsonl: str, topology: str, extra: list[str]) -> dict[str, dict]:
  """The compiled points of an earlier run's `jsonl` for this topology and these flags,
  by _point_key (a line cut short by a kill is ignored)."""
  if not jsonl or not os.path.exists(jsonl):
    return {}
  from bert_jax.runtime import jsonl as jsonl_lib  # pylint: disable=g-import-not-at-top
  return {_point_key(row["overrides"]): row for row in jsonl_lib.rows(jsonl)
          if row.get("topology") == topology and row.get("extra") == list(extra)
          and not row.get("skipped") and row.get("fits") is not None}


def _keep(rows: list[dict], row: dict, jsonl: str) -> None:
  rows.append(row)
  if jsonl:
    # A kill mid-write leaves a line without its newline: end it, so this row stays whole.
    cut = os.path.exists(jsonl) and os.path.getsize(jsonl) and _last_byte(jsonl) != b"\n"
    with open(jsonl, "a", encoding="utf-8") as f:
      f.write(("\n" if cut else "") + json.dumps(row, default=str) + "\n")


def _last_byte(path: str) -> bytes:
  with open(path, "rb") as f:
    f.seek(-1, os.SEEK_END)
    return f.read(1)


def aot_table(rows: list[dict], topology: str) -> str:
  """Markdown: one line per point, then the largest fitting batch per strategy."""
  cell = points.cell
  keys = list(rows[0]["overrides"]) if rows else []
  out = [f"AOT sweep on {topology}: train step per chip (HBM total incl. program; "
         "temporaries = activations and workspace; collectives per step: count / MiB per "
         "chip of all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute; "
         "roofline = lower bound of the step time from peak FLOP/s and HBM bandwidth; "
         "est. ms = the TPU compiler's estimate of the step, bert_jax/aot/cost.py).", "",
         "| " + " | ".join(k.split(".")[-1] for k in keys)
         + " | fits | HBM per chip | temporaries | collectives AR / AG / RS / A2A / CP "
         "| roofline ms | est. ms | compile s |",
         "|" + " --- |" * (len(keys) + 7)]
  best = {}
  for r in rows:
    hbm = (f"{r['hbm']['total'] / 2 ** 30:.2f} GiB" if r.get("hbm") else
           r.get("error", "").replace("train step does not fit: ", "").split(" (")[0][:90])
    roof = f"{r['roofline']['step_seconds'] * 1e3:.1f}" if r.get("roofline") else ""
    comp = f"{r['compile_seconds']:.0f}" if "compile_seconds" in r else ""
    est = f"{r['cost']['optimal_seconds'] * 1e3:.1f}" if r.get("cost") else ""
    out.append("| " + " | ".join(cell(r["overrides"][k]) for k in keys)
               + f" | {'yes' if r['fits'] else 'no'} | {hbm} | {_temporaries(r)} "
               f"| {_collectives(r.get('collectives'))} | {roof} | {est} | {comp} |")
    strategy = points.strategy(r["overrides"])
    batch = r["overrides"].get(points.BATCH_KEY)
    if r["fits"] and batch is not None:
      best[strategy] = max(best.get(strategy, 0), batch)
    else:
      best.setdefault(strategy, 0)
  out += ["", "| strategy | largest global batch that fits |", "| --- | --- |"]
  out += [f"| {', '.join(s)} | {b or 'none of the swept'} |" for s, b in best.items()]
  fastest = max((r for r in rows if r["fits"] and r.get("cost")),
                key=lambda r: r["cost"]["tokens_per_s_per_chip"], default=None)
  if fastest is not None:
    c = fastest["cost"]
    out += ["", "Fastest point that fits, by the TPU compiler's estimate: " + ", ".join(
        f"{k.split('.')[-1]} {cell(v)}" for k, v in fastest["overrides"].items())
        + f" ({c['tokens_per_s_per_chip']:,.0f} tokens/s per chip, "
        f"{c['optimal_seconds'] * 1e3:.1f} ms per step, est. MFU {100 * c['est_mfu']:.0f}%)"]
  return "\n".join(out)


def _estimate(cost: dict | None) -> dict | None:
  """What a row keeps of a step's "cost" (aot/cost.py): the time and what follows."""
  keep = ("optimal_seconds", "est_mfu", "tokens_per_s_per_chip", "bytes_per_chip")
  return {k: cost[k] for k in keep} if cost else None


def _temporaries(row: dict) -> str:
  """Per-chip temporaries in GiB: the compiled step's, or the out-of-memory message's."""
  if row.get("hbm"):
    return (f"{row['hbm']['temporaries'] / 2 ** 30:.2f}" if "temporaries" in row["hbm"]
            else "")
  m = re.search(r"temporaries ([\d.]+) GiB", row.get("error", ""))
  return f">= {m.group(1)}" if m else ""


def _collectives(coll: dict | None) -> str:
  """"count/MiB" per kind (all-reduce, all-gather, reduce-scatter, all-to-all, permute)."""
  if not coll:
    return ""
  kinds = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
  return " / ".join(f"{coll[k]['count']}/{coll[k]['bytes'] / 2 ** 20:.0f}" if k in coll
                    and coll[k]["count"] else "0" for k in kinds)
