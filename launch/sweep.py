#!/usr/bin/env python3
"""Expands a config file's `get_sweep(hyper)` into runs with distinct workdirs.

  python launch/sweep.py --config configs/bert_base.py --workdir_root runs/lr_sweep --dry_run
  python launch/sweep.py --config configs/bert_base.py --workdir_root runs/lr_sweep   # runs them in turn
  python launch/sweep.py ... --launcher tpu --tpu_name my-pod --zone us-central2-b
  python launch/sweep.py ... --launcher slurm
  python launch/sweep.py --config configs/bert_large.py:s512 --aot v5e-256 [--results F.md]

A sweep is a function of `hyper` in the config file (big_vision style):
  def get_sweep(hyper):
    return hyper.product([hyper.sweep("config.train.learning_rate", [1e-4, 2e-4]),
                          hyper.sweep("config.seed", [0, 1])])
`--config` may carry the config arg (`configs/bert_base.py:mlm_only`); extra
`--config.x=y` flags are passed to every run.

`--aot TOPOLOGY` runs nothing: it compiles every point's train step for the TPU
topology (bert_jax/aot, libtpu, no TPU) and prints a markdown table of what fits, per
chip, and the largest global batch that fits per (mesh, remat) strategy.
"""
from __future__ import annotations

import argparse
import difflib
import importlib.util
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from typing import Sequence


class hyper:  # pylint: disable=invalid-name
  """The sweep vocabulary: a sweep is a list of override dicts."""

  @staticmethod
  def sweep(name: str, values) -> list[dict]:
    if not name.startswith("config."):
      raise ValueError(f"sweep keys are flag names like 'config.train.learning_rate', got {name!r}")
    return [{name: v} for v in values]

  @staticmethod
  def product(sweeps: list[list[dict]]) -> list[dict]:
    return [dict(kv for d in combo for kv in d.items()) for combo in itertools.product(*sweeps)]

  @staticmethod
  def zipit(sweeps: list[list[dict]]) -> list[dict]:
    if len({len(s) for s in sweeps}) > 1:
      raise ValueError("zipit needs sweeps of equal length")
    return [dict(kv for d in combo for kv in d.items()) for combo in zip(*sweeps)]


def _load_module(config_path: str):
  path = config_path.split(":", 1)[0]
  if not os.path.exists(path):
    raise FileNotFoundError(f"config file {path} does not exist")
  spec = importlib.util.spec_from_file_location("sweep_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load_sweep(config_path: str, extra: Sequence[str] = ()) -> list[dict]:
  """The sweep's points (their overrides), checked against the config once, before any
  run is started or submitted: an unknown `file.py:arg`, or a sweep key or --config.x flag
  of `extra` that the config lacks, is one ValueError here, not a failure in every run."""
  path, _, arg = config_path.partition(":")
  module = _load_module(config_path)
  if not hasattr(module, "get_sweep"):
    raise ValueError(f"{path} defines no get_sweep(hyper); configs that do: "
                     f"{', '.join(_configs_with_sweeps(path)) or 'none beside it'}")
  config = module.get_config(arg or None)
  points = module.get_sweep(hyper)
  _check_keys(config, points, extra)
  return points


def _configs_with_sweeps(path: str) -> list[str]:
  """The config files beside `path` that define get_sweep (read as text, not run)."""
  folder = os.path.dirname(path) or "."
  out = []
  for name in sorted(os.listdir(folder)):
    if name.endswith(".py"):
      with open(os.path.join(folder, name), encoding="utf-8") as f:
        if "\ndef get_sweep(" in f.read():
          out.append(os.path.join(os.path.dirname(path), name))
  return out


def run_name(overrides: dict) -> str:
  parts = [f"{k.split('.')[-1]}={v}" for k, v in overrides.items()]
  return re.sub(r"[^A-Za-z0-9_.=,-]", "_", ",".join(parts)) or "run"


def commands(config: str, workdir_root: str, extra: list[str], python: str = "python",
             where: tuple[str, ...] = ()):
  """[(workdir, argv)] for every point of the sweep (those `where` selects; a point's
  workdir keeps its index in the whole sweep, so a selection reruns the same workdirs)."""
  points = load_sweep(config, extra)
  chosen = select(points, list(where))
  out = []
  for i, overrides in enumerate(points):
    if overrides not in chosen:
      continue
    workdir = os.path.join(workdir_root, f"{i:03d}_{run_name(overrides)}")
    argv = [python, "-m", "bert_jax.main", f"--config={config}", f"--workdir={workdir}"]
    argv += [f"--{k}={v}" for k, v in overrides.items()] + list(extra)
    out.append((workdir, argv))
  return out


def _check_keys(config, points: list[dict], extra: Sequence[str]) -> None:
  """Raises ValueError naming the first sweep key or --config.x flag `config` lacks."""
  keys = [f[2:].partition("=")[0] for f in extra] + [k for p in points for k in p]
  for key in dict.fromkeys(keys):
    node, path = config, "config"
    for name in key.split(".")[1:]:
      if not hasattr(node, "keys") or name not in node:
        have = sorted(node.keys()) if hasattr(node, "keys") else []
        near = difflib.get_close_matches(name, have, n=1)
        raise ValueError(f"{key}: {path} has no key {name!r}"
                         + (f"; did you mean {near[0]!r}?" if near else f" (it has {have})"))
      node, path = node[name], f"{path}.{name}"


def _set(config, key: str, value) -> None:
  """config.a.b = value for a sweep key 'config.a.b' (the config stays locked)."""
  node = config
  *parents, leaf = key.split(".")[1:]
  for name in parents:
    node = node[name]
  node[leaf] = tuple(value) if isinstance(value, list) else value


def _literal(text: str):
  import ast  # pylint: disable=g-import-not-at-top
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


BATCH_KEY = "config.train.batch_size"


def _strategy(overrides: dict) -> tuple:
  """A sweep point's strategy: its overrides other than the global batch, as table cells."""
  return tuple(_cell(v) for k, v in overrides.items() if k != BATCH_KEY)


def _cell(v) -> str:
  return "x".join(str(x) for x in v) if isinstance(v, (tuple, list)) else str(v)


def select(points: list[dict], where: list[str]) -> list[dict]:
  """The points whose overrides match every "KEY=V1|V2" of `where` (values as the table
  writes them: "-1x8x4", "full"; a tuple also as "(-1,8,4)"), e.g.
  ["config.model.remat_policy=dots_no_batch|full"]. A value no point has is an error."""
  for cond in where:
    key, _, values = cond.partition("=")
    if not values or not any(key in p for p in points):
      raise ValueError(f"--where {cond!r}: expected KEY=V1|V2 with KEY one of the sweep's "
                       f"keys {sorted(points[0]) if points else []}")
    cells = {_cell(p[key]) for p in points if key in p}
    wanted = [_where_value(v) for v in values.split("|")]
    unknown = [v for v in wanted if v not in cells]
    if unknown:  # a selection of nothing would print an empty table or start no run
      raise ValueError(f"--where {cond!r}: no point has {key} = {' or '.join(unknown)}; "
                       f"its values: {', '.join(sorted(cells))}")
    points = [p for p in points if _cell(p.get(key)) in wanted]
  return points


def _where_value(text: str) -> str:
  """A --where value as the table writes it: "(-1, 8, 4)" and "-1,8,4" -> "-1x8x4"."""
  return re.sub(r"[()\[\]\s]", "", text).replace(",", "x") if "," in text else text


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
  points = load_sweep(config_path, extra)
  rows = []
  too_big = {}  # strategy (the overrides but the batch) -> smallest batch that did not fit
  done = _compiled_rows(jsonl, topology, extra)
  for overrides in select(points, list(where)):
    strategy, batch = _strategy(overrides), overrides.get(BATCH_KEY)
    row = done.get(_point_key(overrides))
    if row is not None:
      row = dict(row, overrides=overrides)
      rows.append(row)
      if not row["fits"] and batch is not None:
        too_big[strategy] = min(too_big.get(strategy, batch), batch)
      print(f"# {run_name(overrides)}: fits={row['fits']} (from {jsonl})", file=sys.stderr,
            flush=True)
      continue
    if batch is not None and too_big.get(strategy, batch + 1) <= batch:
      # Memory grows with the batch: a larger one cannot fit where a smaller one did not.
      row = {"overrides": overrides, "fits": False, "skipped": True,
             "error": f"not compiled: batch {too_big[strategy]} already does not fit"}
      _keep(rows, row, jsonl)
      print(f"# {run_name(overrides)}: {row['error']}", file=sys.stderr, flush=True)
      continue
    arg = config_path.split(":", 1)[1] if ":" in config_path else None
    config = _load_module(config_path).get_config(arg)
    config.lock()
    for flag in extra:
      key, _, value = flag[2:].partition("=")
      _set(config, key, _literal(value))
    for key, value in overrides.items():
      _set(config, key, value)
    row = {"overrides": overrides, "topology": topology, "extra": list(extra)}
    try:
      report = check_lib.check(config, topology, steps=("train",), config_name=config_path)
    except report_lib.DoesNotFitError as e:
      report = e.report
      row["error"] = next(r["error"] for r in report["steps"] if not r["fits"])
    except (ValueError, NotImplementedError) as e:  # e.g. a batch that does not divide
      row.update(fits=None, error=str(e))
      _keep(rows, row, jsonl)
      print(f"# {run_name(overrides)}: {e}", file=sys.stderr, flush=True)
      continue
    worst = max(report["steps"], key=lambda r: r.get("hbm", {}).get("total", float("inf")))
    row.update(fits=report["fits"], mesh=report["mesh"], hbm=worst.get("hbm"),
               compile_seconds=sum(r["compile_seconds"] for r in report["steps"]),
               roofline=worst.get("roofline"), chip=report["chip"],
               collectives=worst.get("collectives"))
    _keep(rows, row, jsonl)
    if not row["fits"] and batch is not None:
      too_big[strategy] = min(too_big.get(strategy, batch), batch)
    print(f"# {run_name(overrides)}: fits={row['fits']} "
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
  cell = _cell
  keys = list(rows[0]["overrides"]) if rows else []
  out = [f"AOT sweep on {topology}: train step per chip (HBM total incl. program; "
         "temporaries = activations and workspace; collectives per step: count / MiB per "
         "chip of all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute; "
         "roofline = lower bound of the step time from peak FLOP/s and HBM bandwidth).", "",
         "| " + " | ".join(k.split(".")[-1] for k in keys)
         + " | fits | HBM per chip | temporaries | collectives AR / AG / RS / A2A / CP "
         "| roofline ms | compile s |",
         "|" + " --- |" * (len(keys) + 6)]
  best = {}
  for r in rows:
    hbm = (f"{r['hbm']['total'] / 2 ** 30:.2f} GiB" if r.get("hbm") else
           r.get("error", "").replace("train step does not fit: ", "").split(" (")[0][:90])
    roof = f"{r['roofline']['step_seconds'] * 1e3:.1f}" if r.get("roofline") else ""
    comp = f"{r['compile_seconds']:.0f}" if "compile_seconds" in r else ""
    out.append("| " + " | ".join(cell(r["overrides"][k]) for k in keys)
               + f" | {'yes' if r['fits'] else 'no'} | {hbm} | {_temporaries(r)} "
               f"| {_collectives(r.get('collectives'))} | {roof} | {comp} |")
    strategy = _strategy(r["overrides"])
    batch = r["overrides"].get(BATCH_KEY)
    if r["fits"] and batch is not None:
      best[strategy] = max(best.get(strategy, 0), batch)
    else:
      best.setdefault(strategy, 0)
  out += ["", "| strategy | largest global batch that fits |", "| --- | --- |"]
  out += [f"| {', '.join(s)} | {b or 'none of the swept'} |" for s, b in best.items()]
  return "\n".join(out)


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


REMOTE_DIR = "~/bert_jax"  # tpu_pod.sh's default


def wrap(argv: list[str], args) -> list[str]:
  """The command that starts one run on the chosen launcher. `argv` is
  [python, "-m", "bert_jax.main", flags...]; the remote and SLURM sides supply their own
  interpreter (the checkout's .venv that tpu_pod.sh --setup and the README create)."""
  here = os.path.dirname(os.path.abspath(__file__))
  # Both scripts run `.venv/bin/python -m bert_jax.main "$@"` (the local interpreter's
  # path means nothing on the TPU VMs): pass only the flags.
  if args.launcher == "tpu":
    env = ["env", f"REMOTE_DIR={args.remote_dir}"] if args.remote_dir != REMOTE_DIR else []
    return env + [os.path.join(here, "tpu_pod.sh"), args.tpu_name, args.zone] + argv[3:]
  if args.launcher == "slurm":
    return ["sbatch", os.path.join(here, "slurm.sbatch")] + argv[3:]
  return argv


def run_to_end(cmd: list[str]) -> tuple[int, bool]:
  """(exit status, whether Ctrl-C was pressed) of `cmd`, waited for to its end.

  Ctrl-C reaches the run too (one process group) and a training run then saves its step
  and exits; subprocess.call would kill it 0.25 s after the Ctrl-C, losing the steps
  since its last checkpoint. A second Ctrl-C is the run's own business (it stops at once)."""
  proc = subprocess.Popen(cmd)
  interrupted = False
  while True:
    try:
      return proc.wait(), interrupted
    except KeyboardInterrupt:
      interrupted = True


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--config", required=True)
  p.add_argument("--workdir_root", default="")
  p.add_argument("--aot", default="", metavar="TOPOLOGY",
                 help="compile every point for this TPU topology (e.g. v5e-256), run nothing")
  p.add_argument("--results", default="", help="with --aot: also append the table to this file")
  p.add_argument("--where", action="append", default=[], metavar="KEY=V1|V2",
                 help="only the points whose KEY is one of the values (as the --aot table "
                 "writes them, e.g. config.mesh_shape=-1x8x4)")
  p.add_argument("--jsonl", default="", help="with --aot: append each point's row to this "
                 "file as it compiles")
  p.add_argument("--launcher", choices=["local", "tpu", "slurm"], default="local")
  p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
  p.add_argument("--tpu_name", default="")
  p.add_argument("--zone", default="")
  p.add_argument("--remote_dir", default=REMOTE_DIR, help="with --launcher tpu: the "
                 "checkout on the TPU VMs (launch/tpu_pod.sh's REMOTE_DIR)")
  args, extra = p.parse_known_args(argv)
  bad = [e for e in extra if not e.startswith("--config.")]
  if bad:
    p.error(f"unknown arguments {bad} (only --config.x=y overrides are passed through)")
  if args.aot:
    try:
      table = aot_table(aot_rows(args.config, args.aot, extra, args.jsonl, args.where),
                        args.aot)
    except (FileNotFoundError, ValueError) as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    print(table)
    if args.results:
      with open(args.results, "a", encoding="utf-8") as f:
        f.write("\n" + table + "\n")
    return 0
  if args.results or args.jsonl:
    p.error("--results and --jsonl go with --aot (runs write their own workdirs)")
  if not args.workdir_root:
    p.error("--workdir_root is required (except with --aot)")
  if args.launcher == "tpu" and not (args.tpu_name and args.zone):
    p.error("--launcher tpu needs --tpu_name and --zone")
  try:
    runs = commands(args.config, args.workdir_root, extra, sys.executable, tuple(args.where))
  except (FileNotFoundError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  for workdir, run_argv in runs:
    cmd = wrap(run_argv, args)
    print(" ".join(shlex.quote(c) for c in cmd), flush=True)
    if not args.dry_run:
      try:
        status, interrupted = run_to_end(cmd)
      except OSError as e:  # e.g. no sbatch on this machine: one line, not a traceback
        print(f"error: cannot start {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 2
      if interrupted:
        print(f"interrupted: run {workdir} exited with {status}; the same command resumes "
              "the sweep (finished runs have nothing left to train)", file=sys.stderr)
        return status or 130
      if status:
        print(f"run {workdir} exited with {status}", file=sys.stderr)
        return status
  return 0


if __name__ == "__main__":
  try:
    sys.exit(main())
  except BrokenPipeError:  # `--dry_run | head`: the reader left, as cat would, no traceback
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (python's docs' recipe)
    sys.exit(1)
