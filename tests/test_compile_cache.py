"""compile_cache.py: an entry a killed run left truncated warns once, then is written anew."""
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A run of main's cache set-up and one compile: prints its result.
SCRIPT = """
import sys

import numpy as np
import jax
import jax.numpy as jnp
from bert_jax.runtime import compile_cache
compile_cache.set_compilation_cache(sys.argv[1])
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


def test_an_inference_cli_keeps_its_compiled_programs_for_the_next_call(tmp_path):
  """`python -m bert_jax.embed` twice with --compilation_cache: the first call writes its
  programs, the second reads them back (jax logs each hit) and embeds the same vectors.
  (The suite's 0 s threshold stands in for the CLIs' 0.3 s: the tiny model compiles in
  less.)"""
  text = tmp_path / "in.txt"
  text.write_text("the cat sat on the mat\na dog\n", encoding="utf-8")
  cache = tmp_path / "xla"
  env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
  env.update(PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             JAX_DEBUG_LOG_MODULES="jax._src.compiler")
  tiny = os.path.join(ROOT, "tests", "testdata", "hf", "tiny_bert")
  runs = []
  for i in range(2):
    out = tmp_path / f"out{i}.npy"
    proc = subprocess.run([sys.executable, "-m", "bert_jax.embed", "--checkpoint", tiny,
                           "--input", str(text), "--output", str(out),
                           "--compilation_cache", str(cache)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs.append((proc.stderr, np.load(out)))
  assert _entries(cache) and "compilation cache hit" not in runs[0][0]
  assert "Persistent compilation cache hit" in runs[1][0], runs[1][0][-3000:]
  np.testing.assert_array_equal(runs[1][1], runs[0][1])
