"""No TPU backend attempt on a machine that has no TPU (libtpu's start-up noise).

libtpu is installed by the test requirements and the `tpu` extra because bert_jax.aot
compiles for TPU topologies on any machine. With it installed, jax tries a TPU backend
in every process, and on a machine without a TPU that attempt finds nothing but prints a
multi-line `INVALID_ARGUMENT: Error: unexpected worker hostname 'WARNING: could not
determine TPU worker hostnames ...'` block on every run. So when nothing suggests an
accelerator, JAX_PLATFORMS=cpu is set before jax starts its backends: jax would end on
the CPU anyway, now without the attempt. hardware.configure() does it: every entry point
(the CLIs, `python -m`, bert_jax.load) calls it first; importing bert_jax does not.

What counts as a sign of an accelerator, each leaving everything as jax has it:
  - JAX_PLATFORMS, JAX_FORCE_TPU_INIT or a TPU topology variable in the environment (a
    user's choice; GKE and multi-host TPU launches set TPU_WORKER_HOSTNAMES and friends);
  - a Google PCI device (vendor 0x1ae0: the chips of a Cloud TPU VM, as jax's own
    cloud_tpu_init looks for them) or a TPU device file (/dev/accel*, /dev/vfio/N);
  - a GPU device file (/dev/nvidia*, /dev/dxg, /dev/kfd) or an installed jax plugin
    (jax_plugins entry points: CUDA, ROCm, ...).
A real TPU VM therefore finds its TPU exactly as before. A container that hides both
the PCI devices and /dev/accel* from a TPU host must say JAX_PLATFORMS=tpu,cpu (or set
the TPU_* variables its launcher normally sets).

libtpu still starts where a program asks for it (bert_jax.aot's compile-only topologies,
jax's TPU attempt on a GPU machine): libtpu_env.py gives it one host's settings there,
and those defaults (named in BERT_JAX_LIBTPU_DEFAULTS) are no sign of an accelerator.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import sys

# Set by a user or a TPU launcher. Not TPU_SKIP_MDS_QUERY / TPU_LIBRARY_PATH: importing
# jax sets those on any machine (the first when it finds no TPU chip).
_ENV = ("JAX_PLATFORMS", "JAX_FORCE_TPU_INIT", "TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID",
        "TPU_ACCELERATOR_TYPE", "TPU_NAME", "TPU_HOST_BOUNDS", "TPU_CHIPS_PER_HOST_BOUNDS",
        "TPU_PROCESS_BOUNDS", "TPU_PROCESS_ADDRESSES", "TPU_VISIBLE_CHIPS", "TPU_ML_PLATFORM")
# libtpu_env.py's single-host defaults, as NAME=VALUE words: set by this package on a
# machine without a TPU, they are no sign of one (in this process or its children).
DEFAULTED = "BERT_JAX_LIBTPU_DEFAULTS"
_GOOGLE_PCI_VENDOR = "0x1ae0"
_TPU_DEVICE_FILES = ("dev/accel*", "dev/vfio/[0-9]*")
_GPU_DEVICE_FILES = ("dev/nvidia0", "dev/nvidiactl", "dev/dxg", "dev/kfd")


def tpu_chips(root: str = "/") -> list[str]:
  """This host's TPU chips as the PCI bus and /dev show them (Google PCI devices, TPU
  device files), found without starting a backend or asking the network."""
  chips = []
  for vendor in glob.glob(os.path.join(root, "sys/bus/pci/devices/*/vendor")):
    try:
      with open(vendor, encoding="ascii") as f:
        if f.read().strip() == _GOOGLE_PCI_VENDOR:
          chips.append(vendor)
    except OSError:
      continue
  for pattern in _TPU_DEVICE_FILES:
    chips += glob.glob(os.path.join(root, pattern))
  return chips


def accelerator_signs(root: str = "/", environ=None) -> list[str]:
  """What suggests that jax could find an accelerator here (empty: nothing)."""
  environ = os.environ if environ is None else environ
  signs = _set_variables(environ) + tpu_chips(root)
  for pattern in _GPU_DEVICE_FILES:
    signs += glob.glob(os.path.join(root, pattern))
  if root == "/":  # the installed plugins are this interpreter's, not a test root's
    import importlib.metadata  # pylint: disable=g-import-not-at-top  (60 ms; jax needs it anyway)
    signs += [f"jax_plugins:{e.name}"
              for e in importlib.metadata.entry_points(group="jax_plugins")]
  return signs


def tpu_signs(root: str = "/", environ=None) -> list[str]:
  """What suggests a TPU here (empty: none): its chips (tpu_chips), a TPU variable a user
  or launcher set (TPU_*, JAX_FORCE_TPU_INIT), or JAX_PLATFORMS naming tpu."""
  environ = os.environ if environ is None else environ
  signs = [k for k in _set_variables(environ) if k != "JAX_PLATFORMS"]
  if "tpu" in environ.get("JAX_PLATFORMS", "").lower():
    signs.append("JAX_PLATFORMS")
  return signs + tpu_chips(root)


def _set_variables(environ) -> list[str]:
  """The variables of _ENV that have a value, but for libtpu_env.py's own defaults."""
  ours = dict(w.split("=", 1) for w in environ.get(DEFAULTED, "").split() if "=" in w)
  return [k for k in _ENV if environ.get(k) and environ.get(k) != ours.get(k)]


def cpu_without_accelerator(root: str = "/", environ=None) -> bool:
  """Sets JAX_PLATFORMS=cpu (and jax's config, if jax is imported but its backends are not
  up yet) when libtpu is installed and accelerator_signs finds nothing. Returns whether
  it did."""
  environ = os.environ if environ is None else environ
  if importlib.util.find_spec("libtpu") is None:  # no TPU backend to try: nothing printed
    return False
  if accelerator_signs(root, environ):
    return False
  environ["JAX_PLATFORMS"] = "cpu"  # also read by child processes (grain, Beam workers)
  jax = sys.modules.get("jax")
  if jax is not None and environ is os.environ:  # imported first: it read the env already
    from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
    if not xla_bridge.backends_are_initialized() and not jax.config.jax_platforms:
      jax.config.update("jax_platforms", "cpu")
  return True


def cpu_backend(root: str = "/", environ=None) -> bool:
  """Whether jax will run on its CPU backend here: JAX_PLATFORMS names cpu first, or it
  is unset and nothing suggests an accelerator."""
  environ = os.environ if environ is None else environ
  chosen = environ.get("JAX_PLATFORMS", "")
  if chosen:
    return chosen.split(",")[0].strip() == "cpu"
  return not accelerator_signs(root, environ)
