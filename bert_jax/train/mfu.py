"""Throughput metrics: measured matmul peak and model FLOPs utilization (MFU)."""
from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp


@functools.lru_cache(maxsize=None)
def measured_peak_flops(dtype: str = "float32", n: int = 2048, repeats: int = 5) -> float:
  """FLOP/s of one device on a large square matmul: the denominator of MFU.

  On CPU there is no datasheet figure, so the peak is what this machine's BLAS achieves;
  accelerator users may pass their device's datasheet peak in the config instead.
  """
  dev = jax.local_devices()[0]
  a = jax.device_put(jnp.ones((n, n), dtype), dev)
  mm = jax.jit(lambda x, y: x @ y)
  mm(a, a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    mm(a, a).block_until_ready()
    best = min(best, time.perf_counter() - t0)
  return 2.0 * n ** 3 / best


def mfu(flops_per_step: float, step_seconds: float, num_devices: int,
        peak_flops_per_device: float) -> float:
  """Model FLOPs utilization: achieved model FLOP/s over the devices' peak."""
  return flops_per_step / step_seconds / (num_devices * peak_flops_per_device)
