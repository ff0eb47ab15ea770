"""The host allocator for XLA:CPU's buffers: the training CLI restarts itself once with
GLIBC_TUNABLES set to `SETTING` (Linux, glibc >= 2.35; elsewhere nothing changes):
transparent huge pages, and the memory a step frees kept in the process for the next.

Why: XLA:CPU allocates a step's temporaries, its outputs (the new params and Adam
moments) and the embedding table's gradient as fresh buffers every step. By default
glibc serves every allocation over 32 MiB (its largest mmap threshold) with a new mmap
that free() unmaps again, so each step page-faults and zeroes those buffers anew.
* `glibc.malloc.hugetlb=1` asks the kernel for transparent huge pages on them (madvise,
  which Debian's and Ubuntu's default THP mode honours): 512 times fewer faults. A fresh
  87 MiB output cost 51-58 ms without, 15-18 ms with (bench/RESULTS.md, "The host
  allocator").
* But what is unmapped goes back to the kernel, and a virtual machine whose balloon
  device reports free pages to its host (virtio's free page reporting, here in 2 MiB
  blocks, which is what huge pages free) lets the host reclaim it within seconds. A step
  that comes after a pause (an evaluation, a checkpoint, a data stall, another process's
  turn) then faults its buffers in from the host: a BERT-base step took 7-9.6 s after
  10 s idle against 3.0-3.3 s back to back, the fine-tuning step 2.1-3.3 s against 0.46.
* So glibc also keeps what it frees: one arena (`arena_max=1`: only the main arena grows
  by brk, the others would mmap a large request whatever `mmap_max` says), no mmap
  (`mmap_max=0`) and a trim threshold of 64 GiB (the heap is never shrunk). After the
  first steps no buffer is mapped again: the fine-tuning step 403 against 460 ms back to
  back, 0.42-0.44 s after 10 s idle ("The host allocator after a pause").
The process's resident memory stays at its high-water mark, which a training process
holds anyway. The cost is in compiles, whose many small allocations from many threads
now share one arena: a fresh 200-step `:demo` process took 5-16 s longer (of ~65 s),
the TPU AOT compile test 57 s against 35-38. Numerics do not change: only where the bytes live.

GLIBC_TUNABLES is read once, when a process starts, so a running process cannot change
it: the training CLI (`python -m bert_jax.main`, `bert-jax-train`: every task's
training and predict runs) calls `reexec_with_huge_pages()` first, which execs the same
command line again with the variable added. It does nothing when GLIBC_TUNABLES
already names a glibc.malloc tunable (a user's own allocator policy, `hugetlb=0`
included, is kept whole), when the command is not a script or module file (`python -c`,
an interactive session), when this process is already the restarted one (an environment
that drops GLIBC_TUNABLES cannot make it loop), or off Linux. The API and the inference
CLIs (embed, fill-mask, generate, translate: no optimizer state, smaller buffers) never
restart; their users get the same by exporting the variable before Python starts
(docs/getting-started.md, "Speed on CPU"). `make test` sets only the huge pages: the
suite is mostly compiles, which one malloc arena for all threads slows.
"""
from __future__ import annotations

import os
import sys

NAMESPACE = "glibc.malloc."  # a user's own tunable in it keeps the whole policy theirs
SETTING = ":".join((
    "glibc.malloc.hugetlb=1",              # transparent huge pages for big buffers
    "glibc.malloc.arena_max=1",            # one arena: large requests come from brk...
    "glibc.malloc.mmap_max=0",             # ...never from an mmap of their own
    f"glibc.malloc.trim_threshold={64 << 30}"))  # and the heap is never shrunk
RESTARTED = "BERT_JAX_HUGE_PAGES_RESTARTED"  # set in the restarted process's environment


def env_with_huge_pages(environ=None) -> dict | None:
  """A copy of `environ` with `SETTING` added to GLIBC_TUNABLES, or None when it needs no
  change (a glibc.malloc tunable already named there, with any value) or this is not
  Linux."""
  environ = dict(os.environ if environ is None else environ)
  if not sys.platform.startswith("linux"):
    return None
  current = environ.get("GLIBC_TUNABLES", "")
  if any(item.startswith(NAMESPACE) for item in current.split(":")):
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

