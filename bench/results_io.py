"""One result file per suite run: bench/results/<suite>[-<case>].json, what report.py reads.

A result holds the figures (named values with units), the goal (text, threshold, met)
where one exists, the anchor it is compared to, the exact command line, the machine
(CPU model, cores, memory, OS, accelerator), the commit (HEAD and a dirty flag), the UTC
date and the load average before and after (the CPU is shared). Standard library only:
the driver may be any of the bench venvs, and report.py imports this without jax.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from typing import Any, Optional

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH_DIR)
RESULTS_DIR = os.path.join(BENCH_DIR, "results")


def figure(name: str, value: Any, unit: str = "", note: str = "") -> dict:
  """One named value; `value` a number or, for a range or a ratio pair, a short string."""
  out = {"name": name, "value": value, "unit": unit}
  if note:
    out["note"] = note
  return out


def goal(text: str, threshold: str = "", met: Optional[bool] = None) -> dict:
  """`met` None where the goal cannot be judged from these figures (stated, not met)."""
  return {"text": text, "threshold": threshold, "met": met}


def _read(path: str) -> str:
  try:
    with open(path, encoding="utf-8") as f:
      return f.read()
  except OSError:
    return ""


def machine(accelerator: Optional[str] = None) -> dict:
  """This host: CPU model and cores (/proc/cpuinfo), memory, OS; the accelerator is what
  jax.devices() names when the caller has jax loaded (never imported here)."""
  cpu = next((l.split(":", 1)[1].strip() for l in _read("/proc/cpuinfo").splitlines()
              if l.startswith("model name")), platform.processor() or platform.machine())
  mem_kib = next((int(l.split()[1]) for l in _read("/proc/meminfo").splitlines()
                  if l.startswith("MemTotal:")), 0)
  if accelerator is None and "jax" in sys.modules:
    devices = sys.modules["jax"].devices()
    if devices and devices[0].platform != "cpu":
      accelerator = f"{len(devices)} x {devices[0].device_kind}"
  try:
    cores = len(os.sched_getaffinity(0))
  except AttributeError:
    cores = os.cpu_count() or 1
  return {"cpu": cpu, "cores": cores, "memory_gib": round(mem_kib / 2**20, 1),
          "os": f"{platform.system()} {platform.release()}",
          "accelerator": accelerator or "none"}


def commit() -> dict:
  """HEAD of this checkout and whether tracked files differ from it (bench/results/
  itself aside: a suite run after another has rewritten its file is still clean code)."""
  def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True,
                          check=False).stdout.strip()
  return {"sha": git("rev-parse", "HEAD") or "unknown",
          "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":(exclude)bench/results"))}


def load() -> float:
  return round(os.getloadavg()[0], 2)


# Environment variables that change what a run measures: written before the command.
ENV = ("JAX_PLATFORMS", "XLA_FLAGS", "GLIBC_TUNABLES")


def command(argv: Optional[list] = None) -> str:
  """The command line as run, the script's path relative to the repository root, after
  the ENV variables set for it."""
  argv = list(sys.argv if argv is None else argv)
  if argv and os.path.isabs(argv[0]) and argv[0].startswith(ROOT + os.sep):
    argv[0] = os.path.relpath(argv[0], ROOT)
  env = [f"{k}={shlex.quote(os.environ[k])}" for k in ENV if os.environ.get(k)]
  return " ".join(env + ["python"] + [shlex.quote(a) for a in argv])


def result(suite: str, title: str, figures: list, anchor: str, headline: str, *,
           case: str = "", goal_: Optional[dict] = None, load_before: Optional[float] = None,
           notes: str = "", accelerator: Optional[str] = None) -> dict:
  """A result measured now, in this process (machine, commit, date and load are read)."""
  return {"suite": suite, "case": case, "title": title, "headline": headline,
          "figures": figures, "goal": goal_, "anchor": anchor, "command": command(),
          "machine": machine(accelerator), "commit": commit(),
          "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
          "load": {"before": load_before, "after": load()}, "carried": None,
          "notes": notes}


def parse_cases(parser, cases, argv=None):
  """(args, the --cases chosen, in order) of a suite whose runs are named cases: adds
  --cases (default: all), --results-dir and --no-result to `parser`, parses `argv`, and
  refuses an unknown case name in one line (parser.error)."""
  parser.add_argument("--cases", default=",".join(cases))
  parser.add_argument("--results-dir", default=RESULTS_DIR)
  parser.add_argument("--no-result", action="store_true", help="write no result file")
  args = parser.parse_args(argv)
  chosen = args.cases.split(",")
  unknown = sorted(set(chosen) - set(cases))
  if unknown:
    parser.error(f"unknown --cases {unknown}: expected some of {sorted(cases)}")
  return args, chosen


def path_of(suite: str, case: str = "", results_dir: str = RESULTS_DIR) -> str:
  return os.path.join(results_dir, f"{suite}-{case}.json" if case else f"{suite}.json")


def write(res: dict, results_dir: str = RESULTS_DIR) -> str:
  """Writes `res` atomically (a temporary file in the same folder, then os.replace)."""
  for key in ("suite", "title", "figures", "anchor", "command", "machine", "commit",
              "date"):
    if not res.get(key) and res.get(key) != []:
      raise ValueError(f"result lacks {key!r}")
  os.makedirs(results_dir, exist_ok=True)
  path = path_of(res["suite"], res.get("case", ""), results_dir)
  fd, tmp = tempfile.mkstemp(dir=results_dir, prefix=".tmp-", suffix=".json")
  try:
    with os.fdopen(fd, "w", encoding="utf-8") as f:
      json.dump(res, f, indent=1, sort_keys=True, ensure_ascii=False)
      f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
  return path


def read_all(results_dir: str = RESULTS_DIR) -> list:
  """Every result in `results_dir`, sorted by file name."""
  out = []
  for name in sorted(os.listdir(results_dir)):
    if name.endswith(".json") and not name.startswith("."):
      with open(os.path.join(results_dir, name), encoding="utf-8") as f:
        res = json.load(f)
      res["_file"] = name
      out.append(res)
  return out
