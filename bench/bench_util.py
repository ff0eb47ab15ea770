"""What the cross-venv benches share: venv paths, one-line errors, workers, compile logs.

Our code and PyTorch live in different venvs (bert_jax never imports torch), so a
bench is one driver that runs the other venv's python on a small worker script in
bench/ and talks to it in JSON lines (stdout), one line per answer. Defaults of the
venv flags: `.venv` (ours), `.venv-bench` (ours + transformers' Flax models,
bench/requirements-bench.txt) and `.venv-ref` (torch + transformers +
sentence-transformers, requirements-ref.txt) of the main checkout of this repository
(the one holding .git, also when the bench runs from a git worktree).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Optional, Sequence

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH_DIR)

# Bench scripts are entry points: the platform is settled as the CLIs settle it (no TPU
# attempt, and no libtpu noise, on a machine without one). The reference venvs' workers
# import this file without bert_jax's dependencies.
try:
  from bert_jax import hardware as _hardware  # pylint: disable=g-import-not-at-top
  _hardware.configure()
except ImportError:
  pass


class BenchError(Exception):
  """A missing venv / package or a failed check: one line on stderr, exit status 2."""


def main_checkout() -> str:
  """The checkout that holds .git (for a git worktree: the main one), else this one."""
  try:
    common = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--path-format=absolute", "--git-common-dir"],
        capture_output=True, text=True, check=True).stdout.strip()
    return os.path.dirname(common)
  except (OSError, subprocess.CalledProcessError):
    return ROOT


def default_python(venv: str) -> str:
  """<this checkout>/<venv>/bin/python if it exists, else the main checkout's."""
  here = os.path.join(ROOT, venv, "bin", "python")
  return here if os.path.exists(here) else os.path.join(main_checkout(), venv, "bin",
                                                         "python")


def check_python(path: str, flag: str, what: str) -> str:
  if not (os.path.isfile(path) and os.access(path, os.X_OK)):
    raise BenchError(f"{flag} {path} does not exist or is not executable; create {what} "
                     f"or pass {flag}=/path/to/python")
  return path


def xla_threads() -> int:
  """The cores XLA:CPU runs its intra-op pool on: those this process may run on."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    return os.cpu_count() or 1


def child_env(**extra) -> dict:
  """The environment of a timed child: no persistent XLA cache (compiles are part of
  what is measured), JAX on the CPU backend only (our venvs hold libtpu for the AOT
  bench; a CPU user has none, and its TPU probing at import is not what is compared), no
  hub access (everything is local), plus `extra`."""
  env = dict(os.environ)
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  env.update(JAX_PLATFORMS="cpu", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
             PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
  env.update({k: str(v) for k, v in extra.items()})
  return env


def run_json(argv: Sequence[str], what: str, env: Optional[dict] = None) -> dict:
  """Runs a one-shot worker; returns the JSON of its last stdout line. A worker that
  fails (missing package, failed check) prints one line on stderr: that is the error."""
  proc = subprocess.run(list(argv), capture_output=True, text=True,
                        env=env or child_env())
  if proc.returncode != 0:
    raise BenchError(f"{what} failed (exit {proc.returncode}): {_last_line(proc.stderr)}")
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _last_line(text: str) -> str:
  lines = [l for l in text.strip().splitlines() if l.strip()]
  return lines[-1] if lines else "(no output)"


class Worker:
  """A persistent worker: send one JSON command a line, read one JSON answer a line.

  The worker waits on stdin between commands, so it uses no CPU while the driver
  times the other systems.
  """

  def __init__(self, argv: Sequence[str], what: str, env: Optional[dict] = None):
    self.what = what
    # stderr to a file, not a pipe: a chatty worker must never block on a full pipe.
    self.stderr = tempfile.TemporaryFile(mode="w+")
    self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=self.stderr, text=True, env=env or child_env())

  def read(self) -> dict:
    line = self.proc.stdout.readline()
    if not line:
      self.proc.wait()
      self.stderr.seek(0)
      raise BenchError(f"{self.what} exited (status {self.proc.returncode}): "
                       f"{_last_line(self.stderr.read())}")
    return json.loads(line)

  def ask(self, **command) -> dict:
    self.proc.stdin.write(json.dumps(command) + "\n")
    self.proc.stdin.flush()
    return self.read()

  def close(self) -> None:
    if self.proc.poll() is None:
      try:
        self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=60)
      except (OSError, subprocess.TimeoutExpired):
        self.proc.kill()
        self.proc.wait()


_PROTOCOL = None


def claim_stdout() -> None:
  """Keeps stdout for the JSON answers; whatever libraries print goes to stderr."""
  global _PROTOCOL
  sys.stdout.flush()
  _PROTOCOL = os.fdopen(os.dup(1), "w")
  os.dup2(2, 1)
  sys.stdout = sys.stderr


def serve(handlers: dict) -> None:
  """The worker side of `Worker`: answers {"cmd": name, ...} lines until "quit"."""
  for line in sys.stdin:
    command = json.loads(line)
    name = command.pop("cmd")
    if name == "quit":
      return
    reply(handlers[name](**command))


def pause(report: dict) -> None:
  """A worker that its driver interleaves with others (time_to_quality's runs): answers
  `report`, then waits on stdin, using no CPU, until the driver says {"cmd": "continue"};
  {"cmd": "quit"} or a closed stdin (the driver is gone) ends the process."""
  reply(report)
  line = sys.stdin.readline()
  if not line or json.loads(line).get("cmd") != "continue":
    sys.exit(0)


def reply(obj: dict) -> None:
  out = _PROTOCOL or sys.stdout
  out.write(json.dumps(obj) + "\n")
  out.flush()


REF_VENV = "the reference venv: requirements-ref.txt"
OUR_VENV = "our venv: requirements.txt"


def worker_imports(prog: str, venv: str, *modules: str) -> list:
  """A worker's start: stdout kept for its answers (claim_stdout), then `modules` imported,
  or one line naming the missing one, this python and the venv it should be (`venv`)."""
  claim_stdout()
  try:
    return [importlib.import_module(m) for m in modules]
  except ImportError as e:
    fail(prog, f"{e} in {sys.executable} ({venv})")


def read_spec(prog: str) -> dict:
  """The `--spec SPEC.json` a driver wrote for its worker."""
  parser = argparse.ArgumentParser(prog=prog)
  parser.add_argument("--spec", required=True)
  with open(parser.parse_args().spec, encoding="utf-8") as f:
    return json.load(f)


def fail(prog: str, message: str) -> None:
  """A one-line error on stderr and exit status 2: a driver's (a BenchError), or a
  worker's (its driver shows the line)."""
  print(f"{prog}: error: {message}", file=sys.stderr)
  sys.exit(2)


# JAX_LOG_COMPILES=1 lines: "Finished tracing + transforming f for pjit in 0.01 sec",
# "Finished jaxpr to MLIR module conversion jit(f) in ...", "Finished XLA compilation of
# jit(f) in ...": the compile work of a process we cannot instrument from inside.
_FINISHED = re.compile(r"Finished (tracing \+ transforming|jaxpr to MLIR module conversion|"
                       r"XLA compilation of) (\S+).* in ([0-9.eE+-]+) sec")


def compile_log(stderr: str) -> tuple[dict, dict]:
  """({function: seconds of tracing + lowering + XLA compile}, {function: XLA compiles})
  of every jit in a JAX_LOG_COMPILES=1 log; "jit(f)" and "f" are both "f"."""
  seconds, count = {}, {}
  for kind, name, secs in _FINISHED.findall(stderr):
    name = name[4:-1] if name.startswith("jit(") and name.endswith(")") else name
    seconds[name] = seconds.get(name, 0.0) + float(secs)
    count[name] = count.get(name, 0) + kind.startswith("XLA")
  return seconds, count


def load_line(label: str) -> str:
  one, five, fifteen = os.getloadavg()
  return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({label})"


def cpu_model() -> str:
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return "unknown CPU"


def header(prog: str) -> None:
  """The exact command line and the machine, printed first by every driver."""
  print("command: " + " ".join([os.path.relpath(sys.executable, ROOT)
                                if sys.executable.startswith(ROOT) else sys.executable,
                                os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]))
  print(f"{prog}: {cpu_model()}, {os.cpu_count()} CPUs ({xla_threads()} usable), "
        f"{load_line('start')}", flush=True)
