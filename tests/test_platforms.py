"""platforms.py: no libtpu start-up noise on a machine without a TPU, a TPU host untouched."""
import importlib.util
import os
import subprocess
import sys

import pytest

from bert_jax.hardware import platforms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "testdata", "hf", "tiny_bert")
NOISE = ("unexpected worker hostname", "TPU_WORKER_HOSTNAMES", "INVALID_ARGUMENT",
         "could not determine TPU")
HAS_LIBTPU = importlib.util.find_spec("libtpu") is not None


def _machine(tmp_path, pci=(), devices=()):
  """A fake root: PCI devices by vendor id, device files by name."""
  for i, vendor in enumerate(pci):
    d = tmp_path / "sys" / "bus" / "pci" / "devices" / f"0000:00:0{i}.0"
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
  for name in devices:
    (tmp_path / "dev" / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "dev" / name).touch()
  return str(tmp_path)


@pytest.mark.parametrize("pci,devices,env,sign", [
    (("0x1af4", "0x8086"), (), {}, None),                        # virtio + Intel: a CPU VM
    ((), (), {"TPU_SKIP_MDS_QUERY": "1", "TPU_LIBRARY_PATH": "x"}, None),  # what jax sets
    (("0x8086", "0x1ae0"), (), {}, "vendor"),                     # a Cloud TPU VM's chips
    ((), ("accel0",), {}, "accel0"),                             # v4 / v5e device files
    ((), ("vfio/12",), {}, "vfio/12"),                           # v5p / v6e
    ((), ("nvidia0",), {}, "nvidia0"),
    ((), (), {"TPU_WORKER_HOSTNAMES": "10.0.0.2,10.0.0.3"}, "TPU_WORKER_HOSTNAMES"),
    ((), (), {"JAX_PLATFORMS": "cpu"}, "JAX_PLATFORMS"),           # the user's choice
])
def test_accelerator_signs(tmp_path, pci, devices, env, sign):
  signs = platforms.accelerator_signs(_machine(tmp_path, pci, devices), env)
  if sign is None:
    assert signs == []
  else:
    assert len(signs) == 1 and signs[0].endswith(sign)


def test_cpu_only_where_nothing_suggests_an_accelerator(tmp_path):
  env = {"PATH": "/bin"}
  assert platforms.cpu_without_accelerator(_machine(tmp_path / "cpu", ["0x1af4"]), env) is \
      HAS_LIBTPU
  assert env == ({"PATH": "/bin", "JAX_PLATFORMS": "cpu"} if HAS_LIBTPU else {"PATH": "/bin"})
  tpu_vm = {"PATH": "/bin"}
  assert not platforms.cpu_without_accelerator(
      _machine(tmp_path / "tpu", ["0x1ae0"] * 4, ["accel0", "accel1"]), tpu_vm)
  assert tpu_vm == {"PATH": "/bin"}


def _user_env() -> dict:
  """The environment of a user on this machine: none of the variables that
  accelerator_signs reads (conftest sets JAX_PLATFORMS for itself, and other tests in the
  same worker may leave TPU_* variables behind)."""
  return {k: v for k, v in os.environ.items() if k not in platforms._ENV}  # pylint: disable=protected-access


def _python(*argv):
  """`python *argv` as a user starts it (_user_env)."""
  env = _user_env()
  env["PYTHONPATH"] = ROOT
  return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env,
                        cwd=ROOT, timeout=300)


@pytest.mark.skipif(not HAS_LIBTPU, reason="without libtpu there is no TPU attempt to quiet")
def test_entry_points_print_no_libtpu_noise():
  if platforms.accelerator_signs("/", _user_env()):
    pytest.skip("an accelerator (or its sign) is here: jax keeps its TPU / GPU attempt")
  # The noise is real here: jax alone prints it (else this test could not fail).
  bare = _python("-c", "import jax; jax.devices()")
  assert bare.returncode == 0 and "unexpected worker hostname" in bare.stderr, bare.stderr
  # A CLI that starts jax, and jax imported before bert_jax's explicit configure (as
  # bench scripts do).
  cli = _python("-m", "bert_jax.fill_mask", "--checkpoint", TINY, "--text", "the [MASK] sat .")
  assert cli.returncode == 0 and "[MASK]" in cli.stdout, cli.stderr
  first = _python("-c", "import jax, bert_jax.hardware as h; h.configure(); "
                  "print(jax.devices()[0].platform)")
  assert first.stdout.strip() == "cpu", first.stderr
  for proc in (cli, first):
    assert not [n for n in NOISE if n in proc.stderr], proc.stderr


def test_importing_bert_jax_changes_no_process_state():
  """No environment variable, jax config or lowering rule changes on import: only the
  entry points' hardware.configure() settles the platform."""
  probe = ("import os, jax; env = dict(os.environ); platforms = jax.config.jax_platforms; "
           "import bert_jax, bert_jax.models.bert, bert_jax.train.loop, bert_jax.api, "
           "bert_jax.aot.check, bert_jax.runtime.paths; "
           "print(dict(os.environ) == env, jax.config.jax_platforms == platforms)")
  proc = _python("-c", probe)
  assert proc.returncode == 0 and proc.stdout.split() == ["True", "True"], proc.stderr


def test_tpu_chips_are_the_google_pci_devices_and_tpu_device_files(tmp_path):
  assert platforms.tpu_chips(_machine(tmp_path / "cpu", ["0x1af4", "0x8086"], ["nvidia0"])) == []
  chips = platforms.tpu_chips(_machine(tmp_path / "tpu", ["0x8086", "0x1ae0"], ["accel0"]))
  assert len(chips) == 2 and chips[0].endswith("vendor") and chips[1].endswith("accel0")
