"""Throughput metrics: the MFU denominator (a datasheet peak, else a measured matmul) and
model FLOPs utilization.

The denominator, in order: `train.peak_flops_per_device` when set (> 0); the bf16 dense
datasheet peak of the device kind (bert_jax/hardware/chips.py, the one chip table); else, for
kinds without a datasheet figure (CPU), the FLOP/s of a large matmul measured once at
start-up. The start-up log line names which one was used (`Peak.describe`).
"""
from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp


def peak_dtype(model_config, backend: str) -> str:
  """The dtype whose matmul is measured as the peak: the products a run makes. A
  matmul_dtype (its products accumulate in float32: on an AMX CPU 5x float32's rate) is
  what every Dense layer multiplies in; else the compute dtype, except bfloat16 on CPU,
  whose bf16-in / bf16-out dot is slower than float32's and would flatter the MFU."""
  matmul = getattr(model_config, "matmul_dtype", None)
  if matmul:
    return str(matmul)
  dtype = str(getattr(model_config, "dtype", "float32"))
  return dtype if dtype == "bfloat16" and backend != "cpu" else "float32"


@functools.lru_cache(maxsize=None)
def measured_peak_flops(dtype: str = "float32", n: int = 1024, repeats: int = 5) -> float:
  """FLOP/s of one device on a large square matmul of `dtype` operands accumulated in
  float32 (for float32 the plain product): MFU's denominator when the device kind has no
  datasheet figure (CPU). It moves with the machine's load."""
  dev = jax.local_devices()[0]
  a = jax.device_put(jnp.ones((n, n), dtype), dev)
  mm = jax.jit(lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32))
  mm(a, a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    mm(a, a).block_until_ready()
    best = min(best, time.perf_counter() - t0)
  return 2.0 * n ** 3 / best


@dataclasses.dataclass(frozen=True)
class Peak:
  flops: float    # FLOP/s per device
  source: str     # "config" | "datasheet" | "measured"
  detail: str     # what the figure is, for the log line

  def describe(self) -> str:
    """`MFU peak: 96.1 GFLOP/s per device, measured matmul (no datasheet ...)`."""
    return f"MFU peak: {format_flops(self.flops)} per device, {self.detail}"


def format_flops(flops: float) -> str:
  for unit, scale in (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9)):
    if flops >= scale:
      return f"{flops / scale:.1f} {unit}"
  return f"{flops / 1e6:.1f} MFLOP/s"


def resolve_peak(override: float = 0.0, device_kind: str | None = None,
                 dtype: str = "float32", measure=measured_peak_flops) -> Peak:
  """The MFU denominator for this run (see the module docstring for the order).

  Args:
    override: train.peak_flops_per_device (0: none).
    device_kind: jax.devices()[0].device_kind by default.
    dtype: the matmul dtype measured when there is no datasheet figure.
    measure: measure(dtype) -> FLOP/s (tests pass a fake).
  """
  if override and override > 0:
    return Peak(float(override), "config", "config train.peak_flops_per_device")
  kind = jax.devices()[0].device_kind if device_kind is None else device_kind
  # Imported once the backend runs: bert_jax.aot lets several processes load libtpu (for
  # compile-only use), which a training process must not ask for before its start.
  from bert_jax.hardware import chips  # pylint: disable=g-import-not-at-top
  chip = chips.chip_for_device_kind(kind)
  if chip is not None:
    return Peak(chip.peak_bf16_flops, "datasheet",
                f"datasheet bf16 dense peak of {chip.name} (device_kind {kind!r})")
  return Peak(float(measure(dtype)), "measured",
              f"measured {dtype} matmul (no datasheet figure for device_kind {kind!r})")


def mfu(flops_per_step: float, step_seconds: float, num_devices: int,
        peak_flops_per_device: float) -> float:
  """Model FLOPs utilization: achieved model FLOP/s over the devices' peak."""
  return flops_per_step / step_seconds / (num_devices * peak_flops_per_device)
