"""Huge pages for the host allocator: the training CLI restarts itself once with
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (Linux, glibc >= 2.35; elsewhere nothing changes).

Why: XLA:CPU allocates a step's temporaries, its outputs (the new params and Adam
moments) and the embedding table's gradient as fresh buffers every step, and glibc
serves every allocation over 32 MiB (its largest mmap threshold) with a new mmap that
free() unmaps again. Each step therefore page-faults and zeroes those buffers 4 KiB at
a time: a fresh 87 MiB output costs 51-58 ms here against 6-7 ms for the same
elementwise op in place (bench/RESULTS.md, "The host allocator"). With the tunable glibc
asks the kernel for transparent huge pages on those mappings (madvise, which is what
Debian's and Ubuntu's default THP mode honours): 512 times fewer faults, 15-18 ms; the
packed fine-tuning step of all-MiniLM-L6-v2 on 2 cores was 6-21% faster in interleaved
runs, the CLI's examples/s 7% higher.
Numerics do not change: only where the bytes live.

GLIBC_TUNABLES is read once, when a process starts, so a running process cannot change
it: the training CLI (`python -m bert_jax.main`, `bert-jax-train`: every task's
training and predict runs) calls `reexec_with_huge_pages()` first, which execs the same
command line again with the variable added. It does nothing when GLIBC_TUNABLES
already names glibc.malloc.hugetlb (a user's own choice, `=0` included, is kept), when
the command is not a script or module file (`python -c`, an interactive session), when
this process is already the restarted one (an environment that drops GLIBC_TUNABLES
cannot make it loop), or off Linux. The API and the inference CLIs (embed, fill-mask,
generate, translate: no optimizer state, smaller buffers) never restart; their users get
the same by exporting the variable before Python starts (docs/getting-started.md, "Speed
on CPU"), as `make test` does for the suite.
"""
from __future__ import annotations

import os
import sys

TUNABLE = "glibc.malloc.hugetlb"
SETTING = f"{TUNABLE}=1"
RESTARTED = "BERT_JAX_HUGE_PAGES_RESTARTED"  # set in the restarted process's environment


def env_with_huge_pages(environ=None) -> dict | None:
  """A copy of `environ` with the tunable added to GLIBC_TUNABLES, or None when it
  needs no change (already named there, with any value) or this is not Linux."""
  environ = dict(os.environ if environ is None else environ)
  if not sys.platform.startswith("linux"):
    return None
  current = environ.get("GLIBC_TUNABLES", "")
  if any(item.split("=", 1)[0] == TUNABLE for item in current.split(":") if item):
    return None
  environ["GLIBC_TUNABLES"] = f"{current}:{SETTING}" if current else SETTING
  return environ


def restartable() -> bool:
  """Whether this process is a command line that can be run again as is: a script or
  `-m` module file (argv[0] a file), not `python -c`, stdin or an interactive session."""
  argv0 = sys.argv[0] if sys.argv else ""
  return (bool(getattr(sys, "orig_argv", None)) and os.path.isfile(argv0)
          and not sys.flags.interactive and not hasattr(sys, "ps1"))


def reexec_with_huge_pages() -> None:
  """Execs this command line again with the tunable set (the same PID, so signals and
  launchers see one process); returns only when nothing needs to change. Call it first
  thing in a CLI, before threads start."""
  env = env_with_huge_pages()
  if env is None or not restartable() or os.environ.get(RESTARTED):
    return
  env[RESTARTED] = "1"
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(sys.executable, sys.orig_argv, env)

