"""Accelerator chips (datasheet figures), the device_kind lookup for MFU, and compile-only
TPU topologies from libtpu. ONE table serves both bert_jax/aot (HBM, bandwidth) and the
MFU denominator of the training loop (train/mfu.py).

TPU, per chip, from Google Cloud's TPU system-architecture pages (checked 2026-11):
  v4   https://cloud.google.com/tpu/docs/v4   275 TFLOP/s bf16, 32 GiB HBM2,  1200 GB/s
  v5e  https://cloud.google.com/tpu/docs/v5e  197 TFLOP/s bf16, 16 GiB HBM2e,  819 GB/s
  v5p  https://cloud.google.com/tpu/docs/v5p  459 TFLOP/s bf16, 95 GiB HBM2e, 2765 GB/s
  v6e  https://cloud.google.com/tpu/docs/v6e  918 TFLOP/s bf16, 32 GiB HBM,   1640 GB/s
v4 and v5p chips have two TensorCores run as one "megacore" device (their default), so
one device of a topology is one chip for every generation listed here.

NVIDIA, dense BF16 Tensor Core FLOP/s (the datasheets print the 2:4-sparsity figure, twice
these, with an asterisk):
  A100 (NVIDIA A100 Tensor Core GPU datasheet): 312 TFLOP/s; 40 GB HBM2 1555 GB/s, 80 GB
       HBM2e 2039 GB/s (SXM; the 80 GB PCIe card: 1935 GB/s).
  H100 SXM / PCIe (NVIDIA H100 Tensor Core GPU datasheet): 989.5 / 756 TFLOP/s
       (1,979 / 1,513 sparse); 80 GB, 3.35 TB/s / 2.0 TB/s.
  H200 SXM (NVIDIA H200 Tensor Core GPU datasheet): 989.5 TFLOP/s (1,979 sparse);
       141 GB HBM3e, 4.8 TB/s.
Other kinds (H100 NVL, H200 NVL, CPUs, ...) have no entry: MFU then uses a measured peak.
"""
from __future__ import annotations

import dataclasses
import math
import re

GiB = 2 ** 30


@dataclasses.dataclass(frozen=True)
class Chip:
  name: str
  hbm_bytes: int               # capacity per chip
  peak_bf16_flops: float       # FLOP/s per chip
  hbm_bytes_per_sec: float     # bandwidth per chip


GB = 10 ** 9

CHIPS = {
    "v4": Chip("v4", 32 * GiB, 275e12, 1200e9),
    "v5e": Chip("v5e", 16 * GiB, 197e12, 819e9),
    "v5p": Chip("v5p", 95 * GiB, 459e12, 2765e9),
    "v6e": Chip("v6e", 32 * GiB, 918e12, 1640e9),
    "a100-40gb": Chip("a100-40gb", 40 * GB, 312e12, 1555e9),
    "a100-80gb": Chip("a100-80gb", 80 * GB, 312e12, 2039e9),
    "h100-sxm": Chip("h100-sxm", 80 * GB, 989.5e12, 3350e9),
    "h100-pcie": Chip("h100-pcie", 80 * GB, 756e12, 2000e9),
    "h200": Chip("h200", 141 * GB, 989.5e12, 4800e9),
}
TPU_GENERATIONS = ("v4", "v5e", "v5p", "v6e")

# jax.devices()[0].device_kind -> CHIPS key, first full match wins. TPU kinds as libtpu
# names them; NVIDIA kinds are the CUDA device names (nvidia-smi's "Name").
_DEVICE_KINDS = (
    (r"TPU v4", "v4"),
    (r"TPU v5 ?lite|TPU v5e", "v5e"),
    (r"TPU v5p?", "v5p"),
    (r"TPU v6 ?lite|TPU v6e", "v6e"),
    (r"NVIDIA A100.*80GB.*", "a100-80gb"),        # A100-SXM4-80GB, A100 80GB PCIe
    (r"NVIDIA A100.*", "a100-40gb"),              # A100-SXM4-40GB, A100-PCIE-40GB
    (r"NVIDIA H100 PCIe", "h100-pcie"),
    (r"NVIDIA H100(?: 80GB HBM3| SXM5.*)?", "h100-sxm"),
    (r"NVIDIA H200", "h200"),
)


def chip_for_device_kind(device_kind: str) -> Chip | None:
  """The datasheet entry of a jax device_kind ('TPU v5 lite', 'NVIDIA H100 80GB HBM3'),
  or None for kinds without one (CPU, unlisted GPUs)."""
  for pattern, key in _DEVICE_KINDS:
    if re.fullmatch(pattern, device_kind.strip()):
      return CHIPS[key]
  return None

# Pod-slice names ("v5e-256", "v5p-128") -> topologies. v4/v5p slice names count
# TensorCores (two per chip), v5e/v6e names count chips.
_SLICES = {
    "v5e-16": "v5e:4x4", "v5e-64": "v5e:8x8", "v5e-256": "v5e:16x16",
    "v6e-16": "v6e:4x4", "v6e-256": "v6e:16x16",
    "v5p-8": "v5p:2x2x1", "v5p-32": "v5p:2x2x4", "v5p-128": "v5p:4x4x4",
    "v4-8": "v4:2x2x1", "v4-32": "v4:2x2x4", "v4-128": "v4:4x4x4",
}


def parse_topology(name: str) -> tuple[Chip, str]:
  """'v5e:2x2' or a slice name 'v5e-256' -> (chip, libtpu topology name)."""
  topology = _SLICES.get(name, name)
  m = re.fullmatch(r"(v4|v5e|v5p|v6e):(\d+(?:x\d+){1,2})", topology)
  if not m:
    raise ValueError(f"topology {name!r}: expected GEN:AxB[xC] with GEN in {list(TPU_GENERATIONS)} "
                     f"(e.g. v5e:4x4, v5p:4x4x4) or one of {sorted(_SLICES)}.")
  return CHIPS[m.group(1)], topology


def num_chips(topology: str) -> int:
  return math.prod(int(x) for x in parse_topology(topology)[1].split(":")[1].split("x"))


def drop_cpu_only_xla_flags() -> list[str]:
  """Removes XLA:CPU's own flags (`--xla_cpu_*`) from XLA_FLAGS before libtpu first reads
  it, and says so; returns them. libtpu parses XLA_FLAGS at its first use and aborts the
  process on a flag its XLA does not define (`Unknown flag in XLA_FLAGS:
  --xla_cpu_use_fusion_emitters=false`), which a user's CPU settings would hit. XLA:CPU
  reads the variable once, when its backend starts, so it is started first and keeps them."""
  import os  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  flags = os.environ.get("XLA_FLAGS", "").split()
  cpu_only = [f for f in flags if f.startswith("--xla_cpu_")]
  if cpu_only:
    import jax  # pylint: disable=g-import-not-at-top
    try:
      jax.devices("cpu")
    except RuntimeError:  # no CPU backend in this process (JAX_PLATFORMS): none reads them
      pass
    os.environ["XLA_FLAGS"] = " ".join(f for f in flags if f not in cpu_only)
    print(f"note: XLA_FLAGS {' '.join(cpu_only)}: XLA:CPU's own, not given to the TPU "
          "compiler (libtpu stops on a flag it does not define).", file=sys.stderr)
  return cpu_only


def topology_devices(name: str):
  """(chip, compile-only devices of the slice): needs the libtpu wheel, not a TPU."""
  import os  # pylint: disable=g-import-not-at-top
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  from bert_jax.hardware import libtpu_env  # pylint: disable=g-import-not-at-top
  chip, topology = parse_topology(name)
  drop_cpu_only_xla_flags()
  # libtpu starts here: without a TPU, what hardware.configure() sets for it (a caller
  # may have no entry point: launch/sweep.py --aot, a notebook). Before libtpu, or it
  # prints its E0000 lines about TPU_WORKER_HOSTNAMES.
  libtpu_env.single_host_defaults()
  # libtpu takes an exclusive lock file per machine; compiling never touches a chip, so
  # several compile-only processes (tests, sweeps) may load it side by side.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  kwargs = {"chip_config_name": "megacore"} if chip.name == "v4" else {}
  try:
    desc = topologies.get_topology_desc(topology_name=topology, platform="tpu", **kwargs)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f"cannot describe TPU topology {topology!r} (is the libtpu wheel "
                     f"installed?): {str(e).splitlines()[0]}") from e
  return chip, list(desc.devices)
