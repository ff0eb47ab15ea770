"""The README's two commands on a clean clone, timed: `bash .ci/run` (the suite) or
`make demo` (the main job), each from `git clone` to its last line.

  python bench/clean_clone.py --target test   # suite_time.json and aot_tests.json
  python bench/clean_clone.py --target demo   # demo.json

The clone is of this checkout's HEAD (uncommitted changes are not in it: the result's
commit says which), into a temporary directory removed afterwards. `--target demo` runs
with a fresh HOME, as a new user's machine: the data directory (the config's default,
~/bert_jax_data) is prepared inside the clock and pip's cache is cold. `--target test`
keeps HOME (pip's wheel cache warm; CI's may be cold), and reads pytest's summary line
and its `--durations` lines for the AOT tests' share. Run it on an idle machine: the
load average before and after is in the result. `--results-dir` writes elsewhere,
`--no-result` only prints.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_io  # noqa: E402  pylint: disable=wrong-import-position

SUITE_BUDGET_S = 12 * 60
CI_LIMIT_S = 90 * 60
AOT_BUDGET_S = 90
DEMO_BUDGET_S = 8 * 60


def minutes(seconds: float) -> str:
  return f"{int(seconds // 60)} min {round(seconds % 60)} s"


def run_in_clone(command: str, env: dict) -> tuple[float, str]:
  """(seconds, combined output) of `git clone HEAD` + `command` in the clone."""
  with tempfile.TemporaryDirectory(prefix="clean-clone-") as tmp:
    clone = os.path.join(tmp, "bert_jax")
    t0 = time.time()
    subprocess.run(["git", "clone", "-q", results_io.ROOT, clone], check=True)
    proc = subprocess.run(command, shell=True, cwd=clone, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    seconds = time.time() - t0
    if proc.returncode:
      sys.stdout.write(proc.stdout[-4000:])
      sys.exit(f"clean_clone: error: `{command}` exited {proc.returncode} in the clone")
    return seconds, proc.stdout


def pytest_summaries(output: str) -> list[tuple[dict, float]]:
  """({'passed': n, 'skipped': m, ...}, seconds) of each pytest summary line, in order:
  make test's two stages (the suite, then the docs pages marked docs_slow)."""
  out = []
  for line in output.splitlines():
    if re.search(r"\d+ (passed|deselected).* in [\d.]+s", line):
      counts = {k: int(n) for n, k in re.findall(r"(\d+) (\w+)", line.split(" in ")[0])}
      out.append((counts, float(re.search(r" in ([\d.]+)s", line).group(1))))
  if not out:
    sys.exit("clean_clone: error: no pytest summary line in the output")
  return out


def aot_durations(output: str) -> list[float]:
  """Seconds of each tests/test_aot.py phase in pytest's --durations table."""
  return [float(s) for s, where in re.findall(r"^([\d.]+)s (?:call|setup)\s+(\S+)", output,
                                              re.M) if where.startswith("tests/test_aot.py")]


def _counts(counts: dict) -> str:
  others = ", ".join(f"{n} {k}" for k, n in counts.items() if k not in ("passed", "deselected"))
  return f"{counts.get('passed', 0)} passed" + (f", {others}" if others else "")


def test_results(seconds: float, output: str, load_before: float) -> list:
  """The suite (clone, install and make test's first stage) against its 12 minutes; the
  docs stage (tests/test_docs_blocks.py's slow pages) beside it, inside .ci/run's limit."""
  stages = pytest_summaries(output)
  (counts, pytest_s), docs = stages[0], (stages[1] if len(stages) > 1 else None)
  suite_s = seconds - (docs[1] if docs else 0)
  figures = [results_io.figure("clone, install and the suite (make test's first stage)",
                               round(suite_s), "s", f"{minutes(suite_s)}; pip's wheel "
                               "cache warm"),
             results_io.figure("pytest -n 2 --dist worksteal", round(pytest_s, 2), "s",
                               _counts(counts))]
  if docs:
    figures += [results_io.figure("the docs stage (pages marked docs_slow)", round(docs[1]),
                                  "s", _counts(docs[0])),
                results_io.figure("bash .ci/run in all", round(seconds), "s", minutes(seconds))]
  suite = results_io.result(
      "suite_time", "Suite time", figures,
      anchor="the suite's budget",
      headline=f"{minutes(suite_s)} to the suite's end (pytest {round(pytest_s)} s, "
               f"{counts.get('passed', 0)} passed)"
               + (f"; docs stage {minutes(docs[1])}" if docs else "") + ", fresh clone",
      goal_=results_io.goal("make test on 2 cores", "the suite <= 12 min; .ci/run <= 90 min",
                            suite_s <= SUITE_BUDGET_S and seconds <= CI_LIMIT_S),
      load_before=load_before,
      notes="The CI machine installs with a cold cache.")
  aot = aot_durations(output)
  if not aot:
    return [suite]
  total = sum(aot)
  aot_res = results_io.result(
      "aot_tests", "AOT tests in CI",
      [results_io.figure("tests/test_aot.py in bash .ci/run's --durations", round(total, 1),
                         "s", f"{len(aot)} of the suite's 15 slowest phases"),
       results_io.figure("slowest AOT phase", round(max(aot), 1), "s")],
      anchor="the tests' budget",
      headline=f"{total:.1f} s ({len(aot)} of the 15 slowest phases)",
      goal_=results_io.goal("AOT tests in the suite", "<= 90 s", total <= AOT_BUDGET_S),
      load_before=load_before,
      notes="Only phases in pytest's 15 slowest are counted: a lower bound of the AOT "
            "tests' time.")
  aot_res["hardware"] = "AOT, v5e:2x2 and v4:2x2x1"
  return [suite, aot_res]


def demo_result(seconds: float, output: str, load_before: float) -> dict:
  rates = [float(r) for r in re.findall(r"seq/s ([\d.]+)", output)]
  steady = rates[len(rates) // 2:]  # the second half: compile and warm-up are past
  figures = [results_io.figure("wall time, clone + venv + install + data + training + report",
                               round(seconds), "s", minutes(seconds))]
  if steady:
    figures.append(results_io.figure("steady-state rate (second half of the log lines)",
                                     f"{min(steady):.0f}-{max(steady):.0f}", "seq/s"))
  return results_io.result(
      "demo", "make demo from a fresh clone", figures,
      anchor="the README's budget for its main command",
      headline=f"{minutes(seconds)}, fresh clone to the report, all included",
      goal_=results_io.goal("the README's main command on a 2-core CPU", "<= 8 min",
                            seconds <= DEMO_BUDGET_S),
      load_before=load_before,
      notes="A fresh HOME: pip's cache cold, the data directory prepared in the clock.")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--target", choices=("test", "demo"), required=True)
  parser.add_argument("--results-dir", default=results_io.RESULTS_DIR)
  parser.add_argument("--no-result", action="store_true", help="print only")
  args = parser.parse_args()
  load_before = results_io.load()
  env = dict(os.environ)
  for k in ("VIRTUAL_ENV", "PYTHONPATH", "JAX_PLATFORMS", "XLA_FLAGS"):
    env.pop(k, None)
  if args.target == "test":
    seconds, output = run_in_clone("bash .ci/run", env)
    results = test_results(seconds, output, load_before)
  else:
    with tempfile.TemporaryDirectory(prefix="clean-home-") as home:
      seconds, output = run_in_clone("make demo", dict(env, HOME=home))
    results = [demo_result(seconds, output, load_before)]
  for res in results:
    print(res["title"], "-", res["headline"])
    if not args.no_result:
      print("wrote", results_io.write(res, args.results_dir))


if __name__ == "__main__":
  main()
