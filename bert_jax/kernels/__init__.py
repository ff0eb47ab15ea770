"""Attention behind one function: `attention` picks the path and documents why.

  splash         Pallas flash attention for TPU (kernels/splash.py, under shard_map)
  flash_dropout  our Pallas flash attention for TPU with attention dropout in the kernel
                 (kernels/flash_dropout.py, bits from kernels/dropout_hash.py)
  cudnn          cuDNN flash attention for NVIDIA GPUs (kernels/cudnn.py)
  xla            `jax.nn.dot_product_attention`'s XLA path: no [batch, heads, q, kv] bools
  reference      written out (kernels/reference.py): the semantics every path is tested
                 against; the one that returns the weights

"auto" takes the fused kernel of the platform being traced for where it applies, else
XLA. With attention dropout active (BERT's recipe): flash_dropout on TPU, else the
reference, which materializes the scores and the mask (splash, cuDNN and XLA's path have
no dropout). The run's start-up line names each phase's path and why (describe_phases),
so "auto" never loses a kernel silently. Conventions as in reference.py: q/k/v [batch,
len, heads, d], masks True where attention is allowed (bools or a masks.SegmentMask).
A SegmentMask's sliding window (kernels/window.py) reaches every path (cudnn.py: how).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from bert_jax.kernels import cudnn as cudnn_lib
from bert_jax.kernels.describe import describe_path, describe_phases  # noqa: F401
from bert_jax.kernels import flash_dropout as flash_dropout_lib
from bert_jax.kernels import reference
from bert_jax.kernels import splash as splash_lib
from bert_jax.kernels.masks import SegmentMask, as_dense  # noqa: F401  (what masks it takes)
from bert_jax.runtime import tracing

Array = jax.Array
IMPLEMENTATIONS = ("auto", "splash", "flash_dropout", "xla", "cudnn", "reference")
LANES = splash_lib.LANES   # TPU's lane width: splash reads [.., len, d] tiles of it


def attention(query: Array, key: Array, value: Array, bias: Array | None = None,
              mask=None, dropout_rng=None, dropout_rate: float = 0.0,
              deterministic: bool = True, dtype=jnp.float32, implementation: str = "auto",
              return_weights: bool = False):
  """Scaled dot-product attention -> [batch, q_len, heads, d_v] in `dtype`; with
  return_weights, (output, weights [batch, heads, q_len, kv_len]) by the reference.

  `implementation`: one of IMPLEMENTATIONS. "splash" / "flash_dropout" / "cudnn" raise,
  naming what is missing, when their kernel cannot run this attention; "auto" falls back
  instead. flash_dropout's keep mask is dropout_hash's (seeded by dropout_rng), not the
  reference's jax.random.bernoulli draw: the same distribution, other bits.
  """
  dropout_active = not deterministic and dropout_rate > 0.0
  if return_weights or implementation == "reference":
    out, weights = reference.attention(query, key, value, bias, mask, dropout_rng,
                                       dropout_rate, deterministic, dtype)
    return (out, weights) if return_weights else out
  if runs_splash(implementation, query, value, bias, mask, dropout_active):
    return splash_lib.splash_attention(query, key, value, mask, dtype)
  if runs_flash_dropout(implementation, query, value, bias, mask, dropout_active):
    return flash_dropout_lib.flash_dropout_attention(
        query, key, value, mask, dropout_rng, dropout_rate if dropout_active else 0.0, dtype)
  if runs_cudnn(implementation, query, value, bias, mask, dropout_active, dtype):
    return cudnn_lib.attention(query, key, value, bias, mask, dtype)
  mask = as_dense(mask, query.shape[1], key.shape[1])
  if dropout_active or query.shape[-1] != value.shape[-1]:
    return reference.attention(query, key, value, bias, mask, dropout_rng, dropout_rate,
                               deterministic, dtype)[0]
  q, k, v = (x.astype(dtype) for x in (query, key, value))
  if mask is not None:
    mask = jnp.broadcast_to(mask, (q.shape[0], mask.shape[1], q.shape[1], k.shape[1]))
  if bias is not None:
    bias = bias.astype(dtype)
  return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, implementation="xla")


def runs_splash(implementation: str, query, value, bias, mask, dropout_active: bool) -> bool:
  """Whether `attention` computes this attention with splash's kernel: always
  for "splash" (an error says what it cannot run), for "auto" on TPU where
  splash_lib.unsupported finds nothing missing. Only shapes are read: query / value may
  be jax.ShapeDtypeStruct, so a layer can ask before it has projected them."""
  if implementation not in ("auto", "splash"):
    return False
  why_not = splash_lib.unsupported(
      query, value, bias, None if isinstance(mask, SegmentMask) else mask, dropout_active)
  if implementation == "splash" and why_not:
    raise ValueError(f"model.attention_impl='splash' cannot run this attention: {why_not}.")
  return implementation == "splash" or (tracing.trace_platform() == "tpu" and not why_not)


def runs_flash_dropout(implementation: str, query, value, bias, mask,
                       dropout_active: bool) -> bool:
  """Whether `attention` takes kernels/flash_dropout.py: always for "flash_dropout" (an
  error says what it cannot run; without dropout it is plain flash attention), for "auto"
  on TPU when dropout is active (splash then cannot) and nothing it needs is missing.
  Only shapes are read, as in runs_splash."""
  if implementation != "flash_dropout" and not (implementation == "auto" and dropout_active):
    return False
  why_not = flash_dropout_lib.unsupported(
      query, value, bias, None if isinstance(mask, SegmentMask) else mask)
  if implementation == "flash_dropout" and why_not:
    raise ValueError(f"model.attention_impl='flash_dropout' cannot run this attention: "
                     f"{why_not}.")
  return implementation == "flash_dropout" or (tracing.trace_platform() == "tpu"
                                               and not why_not)


def runs_cudnn(implementation: str, query, value, bias, mask, dropout_active: bool,
               dtype) -> bool:
  """Whether `attention` takes cuDNN: always for "cudnn" (an error says what
  it cannot run), for "auto" when traced for a GPU and cudnn_lib.unsupported finds
  nothing missing. An active dropout is no warning: describe_path names it at start-up."""
  if implementation == "cudnn" or (implementation == "auto"
                                   and tracing.trace_platform() == "gpu"):
    why_not = cudnn_lib.unsupported(query, value, bias, mask, dropout_active, dtype)
    if implementation == "cudnn" and why_not:
      raise ValueError(f"model.attention_impl='cudnn' cannot run this attention: {why_not}.")
    if why_not and not dropout_active:
      cudnn_lib.warn_once(why_not)
    return not why_not
  return False
