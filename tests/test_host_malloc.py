"""bert_jax/hardware/host_malloc.py: the CLIs restart once with glibc's allocator tunables, keep a
user's own glibc.malloc policy, never restart what is not a command line, and the
restarted process really gets transparent huge pages for a large allocation and keeps
what it frees (no mmap of its own, nothing unmapped)."""
import os
import subprocess
import sys
import textwrap

import pytest

from bert_jax.hardware import host_malloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_tunable_is_added_appended_or_left_as_the_user_set_it(monkeypatch):
  setting = ("glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:"
             "glibc.malloc.trim_threshold=68719476736")
  assert host_malloc.SETTING == setting
  assert host_malloc.env_with_huge_pages({"A": "1"}) == {"A": "1", "GLIBC_TUNABLES": setting}
  assert host_malloc.env_with_huge_pages({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"})[
      "GLIBC_TUNABLES"] == "glibc.pthread.rseq=0:" + setting
  for own in ("glibc.malloc.hugetlb=0", "glibc.malloc.arena_max=2",
              "glibc.pthread.rseq=0:glibc.malloc.hugetlb=2"):
    assert host_malloc.env_with_huge_pages({"GLIBC_TUNABLES": own}) is None
  monkeypatch.setattr(sys, "platform", "darwin")
  assert host_malloc.env_with_huge_pages({}) is None


_CHILD = textwrap.dedent("""
    import os, sys
    print("started", os.getpid(), os.environ.get("GLIBC_TUNABLES"), flush=True)
    from bert_jax.hardware import host_malloc
    host_malloc.reexec_with_huge_pages()
    import ctypes
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    def maps():
      with open("/proc/self/maps") as f:
        return {l.split()[0] for l in f}
    p = libc.malloc(64 << 20)  # 64 MiB through glibc (as XLA's buffers; numpy madvises its own)
    ctypes.memset(p, 1, 64 << 20)
    with open("/proc/self/smaps_rollup") as f:
      huge = [int(l.split()[1]) for l in f if l.startswith("AnonHugePages")][0]
    before = maps()
    libc.free(ctypes.c_void_p(p))  # kept in the heap, or unmapped?
    kept = int(maps() == before)
    print("ran", os.getpid(), os.environ.get("GLIBC_TUNABLES"), huge, kept, flush=True)
""")


def _run(args, **env):
  child_env = {k: v for k, v in os.environ.items()
               if k not in ("GLIBC_TUNABLES", host_malloc.RESTARTED)}
  child_env.update(env)
  out = subprocess.run([sys.executable, *args], cwd=ROOT, env=child_env, check=True,
                       capture_output=True, text=True, timeout=60).stdout
  return [line.split() for line in out.splitlines()]


def _thp_mode():
  try:
    with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as f:
      return f.read().split("[")[1].split("]")[0]
  except (OSError, IndexError):
    return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tunables: Linux")
def test_a_script_restarts_once_in_the_same_process_with_its_allocator_policy(tmp_path):
  script = tmp_path / "child.py"
  script.write_text(_CHILD)
  lines = _run([str(script)])
  # Two starts, one PID (exec, not a child): signals and launchers see one process.
  assert [l[0] for l in lines] == ["started", "started", "ran"]
  assert lines[0][2] == "None" and lines[1][2] == lines[2][2] == host_malloc.SETTING
  assert lines[0][1] == lines[1][1] == lines[2][1]
  # A user's own setting is kept, and then nothing restarts.
  off = _run([str(script)], GLIBC_TUNABLES="glibc.malloc.hugetlb=0")
  assert [l[0] for l in off] == ["started", "ran"]
  assert off[1][2] == "glibc.malloc.hugetlb=0"
  # Freed memory stays in the process: no mapping goes away (by default glibc unmaps a
  # freed 64 MiB block, and the next request maps it anew).
  assert lines[2][4] == "1" and off[1][4] == "0", (lines, off)
  if _thp_mode() == "madvise":  # Debian's default: huge pages only where glibc asks
    assert int(lines[2][3]) >= 32 << 10, lines  # kB of the 64 MiB in huge pages
    assert int(off[1][3]) == 0, off


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tunables: Linux")
def test_a_restarted_process_never_restarts_again(tmp_path):
  """An environment that drops GLIBC_TUNABLES on exec would otherwise exec forever."""
  script = tmp_path / "child.py"
  script.write_text(_CHILD)
  lines = _run([str(script)], BERT_JAX_HUGE_PAGES_RESTARTED="1")
  assert [l[0] for l in lines] == ["started", "ran"] and lines[1][2] == "None"


def test_python_c_is_not_a_command_line_to_restart():
  lines = _run(["-c", _CHILD])
  assert [l[0] for l in lines] == ["started", "ran"] and lines[1][2] == "None"


def test_the_docs_export_the_clis_setting():
  """docs/getting-started.md's export line for API users is the CLI's policy, whole."""
  with open(os.path.join(ROOT, "docs", "getting-started.md"), encoding="utf-8") as f:
    exports = [l.strip() for l in f if l.startswith("export GLIBC_TUNABLES=")]
  assert exports == [f"export GLIBC_TUNABLES={host_malloc.SETTING}"]
