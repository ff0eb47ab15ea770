"""Weights prepared once for decoding: Dense kernels stored in the matmul dtype."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def cast_kernels(params, cfg):
  """`params` with every Dense / DenseGeneral kernel stored in cfg.matmul_dtype (unchanged
  when it is None), for inference: cast once at load, not in every jitted call.

  A jitted generate or beam search would otherwise cast float32 kernels to the matmul
  dtype on each call (hoisted out of its loop, not out of the call). Kernels already in that dtype
  compute the same: flax promotes them to the compute dtype and cast_dot_general casts
  back, a lossless pair XLA removes. Embedding tables are left alone: they are also
  gathered, and a bfloat16 table would change the residual stream.
  """
  if cfg.matmul_dtype is None:
    return params
  dtype = jnp.dtype(cfg.matmul_dtype)

  def cast(path, leaf):
    names = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]  # boxed or not
    return leaf.astype(dtype) if names and names[-1] == "kernel" else leaf

  return jax.tree_util.tree_map_with_path(cast, params)
