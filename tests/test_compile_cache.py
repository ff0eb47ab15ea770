"""compile_cache.py: an entry a killed run left truncated warns once, then is written anew."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A run of main's cache set-up and one compile: prints its result.
SCRIPT = """
import sys
import jax
import jax.numpy as jnp
from bert_jax import main
main.set_compilation_cache(sys.argv[1])
x = jnp.arange(64 * 64, dtype=jnp.float32).reshape(64, 64) / 4096
print(float(jax.jit(lambda x: jnp.tanh(x @ x.T).sum())(x)))
"""
WARNING = "Error reading persistent compilation cache entry"


def _run(cache):
  env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
  env.update(PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  proc = subprocess.run([sys.executable, "-c", SCRIPT, str(cache)], capture_output=True,
                        text=True, env=env, cwd=ROOT, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


def _entries(cache):
  return {p.name: p.stat().st_size for p in cache.iterdir() if p.name.endswith("-cache")}


def test_a_truncated_entry_warns_once_then_is_written_again(tmp_path):
  cache = tmp_path / "xla"
  first = _run(cache)
  entries = _entries(cache)
  assert entries and WARNING not in first.stderr
  for name, size in entries.items():  # a kill in the middle of jax's in-place write
    with open(cache / name, "r+b") as f:
      f.truncate(size // 2)
  second = _run(cache)
  assert second.stderr.count(WARNING) == len(entries), second.stderr
  assert second.stderr.count("Removed the unreadable compilation cache entry") == len(entries)
  assert second.stdout == first.stdout  # compiled afresh, same result
  rewritten = _entries(cache)  # written again whole (compiles vary by a few bytes)
  assert sorted(rewritten) == sorted(entries)
  assert all(rewritten[n] > entries[n] * 0.9 for n in entries), (rewritten, entries)
  third = _run(cache)
  assert WARNING not in third.stderr and "Removed" not in third.stderr, third.stderr
  assert third.stdout == first.stdout
