"""libtpu_env.py: libtpu's one-host settings only where no TPU is, never over a set value,
and an AOT compile on this machine without libtpu's E0000 / TPU_WORKER_HOSTNAMES lines."""
import importlib.util
import os
import subprocess
import sys

import pytest

from bert_jax import hardware
from bert_jax.hardware import libtpu_env, platforms
from tests.test_platforms import HAS_LIBTPU, _machine  # the fake root of the platform signs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
needs_libtpu = pytest.mark.skipif(not HAS_LIBTPU, reason="no libtpu: nothing to settle")
SINGLE_HOST = {"TPU_SKIP_MDS_QUERY": "1", "TPU_HOST_BOUNDS": "1,1,1",
               "TPU_PROCESS_ADDRESSES": "localhost:8476", "TPU_WORKER_ID": "0"}


@needs_libtpu
def test_a_machine_without_a_tpu_gets_one_hosts_settings(tmp_path):
  cpu_vm = _machine(tmp_path, ["0x1af4", "0x8086"])     # virtio + Intel
  env = {"PATH": "/bin", "JAX_PLATFORMS": "cpu"}
  assert libtpu_env.single_host_defaults(cpu_vm, env) == SINGLE_HOST
  assert env == {"PATH": "/bin", "JAX_PLATFORMS": "cpu", **SINGLE_HOST,
                 "BERT_JAX_LIBTPU_DEFAULTS": "TPU_SKIP_MDS_QUERY=1 TPU_HOST_BOUNDS=1,1,1 "
                                             "TPU_PROCESS_ADDRESSES=localhost:8476 "
                                             "TPU_WORKER_ID=0"}
  # Ours are no TPU (nor accelerator) sign, here or in a child that inherits them: the
  # child still settles JAX_PLATFORMS=cpu, as a fresh user's process does.
  assert platforms.tpu_signs(cpu_vm, env) == []
  child = {k: v for k, v in env.items() if k != "JAX_PLATFORMS"}
  assert platforms.accelerator_signs(cpu_vm, child) == []
  assert platforms.cpu_without_accelerator(cpu_vm, child) and child["JAX_PLATFORMS"] == "cpu"
  # A second call (every entry point, then each topology) sets nothing more.
  assert libtpu_env.single_host_defaults(cpu_vm, env) == {} and env["TPU_WORKER_ID"] == "0"
  # A value changed after ours is a user's again: a TPU sign.
  env["TPU_WORKER_ID"] = "3"
  assert platforms.tpu_signs(cpu_vm, env) == ["TPU_WORKER_ID"]


@needs_libtpu
def test_a_value_already_set_is_kept(tmp_path):
  env = {"TPU_SKIP_MDS_QUERY": "0", "TPU_PROCESS_ADDRESSES": ""}  # set, even if empty
  assert libtpu_env.single_host_defaults(_machine(tmp_path), env) == {
      "TPU_HOST_BOUNDS": "1,1,1", "TPU_WORKER_ID": "0"}
  assert env["TPU_SKIP_MDS_QUERY"] == "0" and env["TPU_PROCESS_ADDRESSES"] == ""
  assert env["BERT_JAX_LIBTPU_DEFAULTS"] == "TPU_HOST_BOUNDS=1,1,1 TPU_WORKER_ID=0"


@pytest.mark.parametrize("pci,devices,env", [
    (("0x8086", "0x1ae0"), (), {}),                        # a Cloud TPU VM's chips
    ((), ("accel0",), {}),                                  # v4 / v5e device files
    ((), ("vfio/12",), {}),                                 # v5p / v6e
    ((), (), {"TPU_WORKER_HOSTNAMES": "10.0.0.2,10.0.0.3", "TPU_WORKER_ID": "1"}),  # GKE
    ((), (), {"TPU_ACCELERATOR_TYPE": "v5litepod-16"}),
    ((), (), {"JAX_PLATFORMS": "tpu,cpu"}),                 # a container hiding the chips
    ((), (), {"JAX_FORCE_TPU_INIT": "1"}),
])
def test_a_tpu_host_keeps_its_own_settings(tmp_path, pci, devices, env):
  before = dict(env)
  assert libtpu_env.single_host_defaults(_machine(tmp_path, pci, devices), env) == {}
  assert env == before


def test_nothing_is_set_without_libtpu(tmp_path, monkeypatch):
  monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
  env = {}
  assert libtpu_env.single_host_defaults(_machine(tmp_path), env) == {} and env == {}
  env = {"TPU_LIBRARY_PATH": "/opt/libtpu.so"}       # libtpu without the wheel
  assert libtpu_env.single_host_defaults(_machine(tmp_path), env) == SINGLE_HOST


def test_configure_sets_them_where_jax_runs_without_a_tpu():
  env = {"JAX_PLATFORMS": "tpu"}
  assert hardware.configure(environ=env) == "accelerator"
  assert not [k for k in env if k.startswith("TPU_") or k == platforms.DEFAULTED]
  env = {"JAX_PLATFORMS": "cpu"}
  assert hardware.configure(environ=env) == "cpu"
  no_tpu_here = HAS_LIBTPU and not platforms.tpu_chips()
  assert {k: env.get(k) for k in SINGLE_HOST} == (
      SINGLE_HOST if no_tpu_here else dict.fromkeys(SINGLE_HOST))


def _user_env() -> dict:
  """A user's environment on this machine: none of the variables that the session's own
  hardware.configure() set (conftest), no XLA:CPU flags, this checkout importable."""
  drop = set(platforms._ENV) | set(SINGLE_HOST) | {platforms.DEFAULTED, "XLA_FLAGS"}  # pylint: disable=protected-access
  return dict({k: v for k, v in os.environ.items() if k not in drop}, PYTHONPATH=ROOT)


def _noise(stderr: str) -> list[str]:
  return [l for l in stderr.splitlines() if "E0000" in l or "TPU_WORKER_HOSTNAMES" in l]


@needs_libtpu
def test_an_aot_compile_prints_no_libtpu_error_lines(tmp_path):
  env = _user_env()
  if platforms.tpu_signs("/", env):
    pytest.skip("a TPU (or its sign) is here: libtpu keeps the host's own settings")
  # The lines are real here: libtpu started without the settings prints them (else this
  # test could not fail).
  bare = subprocess.run(
      [sys.executable, "-c", "from jax.experimental import topologies; "
       "topologies.get_topology_desc(topology_name='v5e:2x2', platform='tpu')"],
      capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
  assert bare.returncode == 0 and _noise(bare.stderr), bare.stderr
  # The smallest real compile through the CLI: word2vec's train step at 1000 words for
  # v5e:2x2 (5 s here; bert_tiny's one-layer train step: 25 s), libtpu started as for any.
  aot = subprocess.run(
      [sys.executable, "-m", "bert_jax.aot", "--config", "configs/word2vec.py",
       "--topology", "v5e:2x2", "--vocab_size", "1000", "--output_dir", str(tmp_path)],
      capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
  assert aot.returncode == 0 and (tmp_path / "train_phase0.hlo.txt").exists(), aot.stderr
  assert "on v5e:2x2 (4 x v5e" in aot.stdout and "vocabulary 1000: compiled" in aot.stdout
  assert _noise(aot.stderr) == [] and "could not determine" not in aot.stderr, aot.stderr
