"""main's process set-up: the persistent compilation cache."""
import os

import jax
import jax.numpy as jnp
import pytest
from jax.experimental.compilation_cache import compilation_cache

from bert_jax import main
from bert_jax.runtime import compile_cache
from bert_jax.hardware import platforms


@pytest.fixture
def restore_cache_dir():
  # main sets the directory before its first compile; a test process has compiled
  # already, so the cache is re-initialized around the test.
  before = jax.config.jax_compilation_cache_dir
  compilation_cache.reset_cache()
  yield
  jax.config.update("jax_compilation_cache_dir", before)
  compilation_cache.reset_cache()


def test_compilation_cache_default_flag_and_off(restore_cache_dir, tmp_path, monkeypatch):
  monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "env"))
  assert compile_cache.set_compilation_cache(None) == str(tmp_path / "env")
  monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  assert compile_cache.set_compilation_cache(None) == str(tmp_path / "home" / ".cache" / "bert_jax" / "xla")
  before = jax.config.jax_compilation_cache_dir
  assert compile_cache.set_compilation_cache("") == "" and jax.config.jax_compilation_cache_dir == before
  # A compile lands in the chosen directory (the tests run with a 0 s threshold).
  chosen = tmp_path / "flag"
  assert compile_cache.set_compilation_cache(str(chosen)) == str(chosen)
  jax.jit(lambda x: jnp.sin(x) * 3.25 + 0.125)(jnp.arange(7.0)).block_until_ready()
  assert chosen.is_dir() and os.listdir(chosen)
  # The inference CLIs' lower threshold applies unless the environment sets one.
  threshold = jax.config.jax_persistent_cache_min_compile_time_secs
  try:
    compile_cache.set_compilation_cache(str(chosen), 0.3)
    assert jax.config.jax_persistent_cache_min_compile_time_secs == threshold  # conftest's
    monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")
    compile_cache.set_compilation_cache(str(chosen), 0.3)
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.3
  finally:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", threshold)


def test_a_cloud_tpu_vm_joins_its_pod_slice_without_launcher_variables(monkeypatch):
  """gcloud's TPU VMs keep the slice's worker list in their metadata, not in the
  environment: TPU chips on the PCI bus are enough to ask jax's auto-detection."""
  import types  # pylint: disable=g-import-not-at-top
  for var in ("SLURM_JOB_ID", "TPU_WORKER_HOSTNAMES", "JAX_COORDINATOR_ADDRESS"):
    monkeypatch.delenv(var, raising=False)
  monkeypatch.setattr(main, "FLAGS", types.SimpleNamespace(coordinator_address=None,
                                                           heartbeat_timeout=77))
  monkeypatch.setattr(jax.config, "update", lambda *a: None)  # gloo: only before backends start
  calls = []

  def initialize(**kwargs):
    calls.append(kwargs)
    if outcome:
      raise outcome

  monkeypatch.setattr(jax.distributed, "initialize", initialize)
  chips = []
  monkeypatch.setattr(platforms, "tpu_chips", lambda: chips)
  outcome = None
  main._maybe_initialize_distributed()  # a CPU machine: a one-process job, nothing asked
  assert calls == []
  chips.append("/sys/bus/pci/devices/0000:00:04.0/vendor")
  main._maybe_initialize_distributed()
  assert calls == [{"heartbeat_timeout_seconds": 77}]
  # A TPU host that is no pod slice: jax finds no cluster and the run goes on alone.
  outcome = ValueError("coordinator_address should be defined.")
  main._maybe_initialize_distributed()
  assert len(calls) == 2


def test_a_run_stopped_by_ctrl_c_exits_130_after_its_save():
  """The loop saves on a first Ctrl-C as on SIGTERM (tests/train/test_loop.py), but only
  preemption exits 0: a user's stop must not let `main && next` go on."""
  assert main.exit_status({"step": 6, "preempted": False, "stopped_by": ""}) == 0
  assert main.exit_status({"step": 3, "preempted": True, "stopped_by": "SIGTERM"}) == 0
  assert main.exit_status({"step": 3, "preempted": True, "stopped_by": "SIGINT"}) == 130
  assert main.exit_status(None) == 0  # predict mode and tasks with their own trainer
