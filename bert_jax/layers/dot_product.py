"""Scaled dot-product attention and its platform dispatch: splash on TPU (layers/splash.py),
cuDNN on GPU (layers/cudnn.py), XLA elsewhere, and the written-out reference that the
fused paths are tested against.

Conventions as in layers/attention.py: q/k/v [batch, len, heads, head_dim]; masks True
where attention is allowed (bools or a masks.SegmentMask); biases added to the logits.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from bert_jax.runtime import parallel
from bert_jax.layers import cudnn as cudnn_lib
from bert_jax.layers import dropout as dropout_lib
from bert_jax.layers import splash as splash_lib
from bert_jax.layers.masks import MASK_VALUE, SegmentMask, as_dense

Array = jax.Array

# Logical names of the activations, pinned under a mesh (parallel.constrain): heads over
# `tensor` (as the projection kernels are), rows over the data axes. Without the pins the
# partitioner may keep [batch, heads, len, len] scores whole on every tensor chip.
SCORES = ("batch", "heads", "length", "kv_length")           # [batch, heads, q, kv]
QUERY = ("batch", "length", "heads", "kv")                   # [batch, q_len, heads, d]
KEY_VALUE = ("batch", "kv_length", "heads", "kv")            # [batch, kv_len, heads, d]


def reference_attention(query: Array, key: Array, value: Array, bias: Array | None = None,
                        mask: Array | None = None, dropout_rng=None, dropout_rate: float = 0.0,
                        deterministic: bool = True, dtype=jnp.float32):
  """softmax(Q K^T / sqrt(d_k) + bias) V, written out; also returns the attention matrix.

  Args:
    query: [batch, q_len, heads, d_k]; key: [batch, kv_len, heads, d_k];
    value: [batch, kv_len, heads, d_v].
    bias: additive, broadcastable to [batch, heads, q_len, kv_len].
    mask: bool, broadcastable to the same; False positions get no weight.

  Returns:
    (output [batch, q_len, heads, d_v], weights [batch, heads, q_len, kv_len] float32).
  """
  d_k = query.shape[-1]
  mask = as_dense(mask, query.shape[1], key.shape[1])
  logits = jnp.einsum("bqhd,bkhd->bhqk", query, key,
                      preferred_element_type=jnp.float32) / jnp.sqrt(d_k).astype(jnp.float32)
  logits = parallel.constrain(logits, SCORES)
  if bias is not None:
    logits = logits + bias.astype(jnp.float32)
  if mask is not None:
    logits = jnp.where(mask, logits, MASK_VALUE)
  weights = jax.nn.softmax(logits, axis=-1)  # float32 softmax, whatever the compute dtype
  probs = weights
  if not deterministic and dropout_rate > 0.0:
    probs = dropout_lib.dropout(dropout_rng, weights, dropout_rate)
  out = jnp.einsum("bhqk,bkhd->bqhd", probs.astype(dtype), value.astype(dtype))
  return out, weights


def dot_product_attention(query: Array, key: Array, value: Array, bias: Array | None = None,
                          mask: Array | None = None, dropout_rng=None, dropout_rate: float = 0.0,
                          deterministic: bool = True, dtype=jnp.float32,
                          implementation: str = "auto"):
  """Scaled dot-product attention, fused where possible. Returns [batch, q_len, heads, d_v].

  `implementation`: "splash" is the Pallas flash kernel for TPU (layers/splash.py: a
  SegmentMask or no mask, no bias, no attention dropout); "cudnn" is flash attention on
  NVIDIA GPUs (layers/cudnn.py: masks as sequence lengths and mask types, bf16/fp16, no
  attention dropout); either raises naming what is missing. "xla" is
  `jax.nn.dot_product_attention`'s XLA path; "reference" the written-out one. "auto":
  splash on TPU and cuDNN on GPU where they apply (a GPU that cannot take cuDNN warns
  once), else XLA; an active attention dropout takes the reference path (see
  describe_path: the run's start-up line names the path).
  """
  dropout_active = not deterministic and dropout_rate > 0.0
  if runs_splash(implementation, query, value, bias, mask, dropout_active):
    return splash_lib.splash_attention(query, key, value, mask, dtype)
  if runs_cudnn(implementation, query, value, bias, mask, dropout_active, dtype):
    return cudnn_lib.attention(query, key, value, bias, mask, dtype)
  if (isinstance(mask, SegmentMask) and mask.in_blocks is not None and bias is None
      and query.shape[1] == key.shape[1]):
    return _in_blocks_or_rows(query, key, value, mask, dropout_rng, dropout_rate,
                              deterministic, dtype, implementation)
  mask = as_dense(mask, query.shape[1], key.shape[1])
  if (implementation == "reference" or dropout_active or query.shape[-1] != value.shape[-1]):
    return reference_attention(query, key, value, bias, mask, dropout_rng, dropout_rate,
                               deterministic, dtype)[0]
  q, k, v = (x.astype(dtype) for x in (query, key, value))
  if mask is not None:
    mask = jnp.broadcast_to(mask, (q.shape[0], mask.shape[1], q.shape[1], k.shape[1]))
  if bias is not None:
    bias = bias.astype(dtype)
  return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, implementation="xla")


def _in_blocks_or_rows(query, key, value, mask: SegmentMask, dropout_rng, dropout_rate,
                       deterministic, dtype, implementation):
  """Attention over whole rows, or, when no document crosses a block (mask.in_blocks,
  decided per batch on device), over [batch * len / block, block] rows: the same
  outputs (every score across blocks is masked anyway) at block / len of the score
  FLOPs. Packed fine-tuning rows of 128 hold ~4.5 sentences, so their rows of 64 halve
  the attention's work (tasks/finetune/packing.py lays the rows out so)."""
  batch, length = query.shape[:2]
  blocks = length // mask.block

  def rows(q, k, v, q_ids, kv_ids, rng):
    return dot_product_attention(q, k, v, None, SegmentMask(q_ids, kv_ids, mask.causal),
                                 rng, dropout_rate, deterministic, dtype, implementation)

  def in_blocks(q, k, v, q_ids, kv_ids, rng):
    split = lambda x: x.reshape(batch * blocks, mask.block, *x.shape[2:])
    out = rows(split(q), split(k), split(v), split(q_ids), split(kv_ids), rng)
    return out.reshape(batch, length, *out.shape[2:])          # [batch, len, heads, d_v]

  return jax.lax.cond(mask.in_blocks, in_blocks, rows, query, key, value, mask.q_ids,
                      mask.kv_ids, dropout_rng)


def runs_splash(implementation: str, query, value, bias, mask, dropout_active: bool) -> bool:
  """Whether `dot_product_attention` computes this attention with splash's kernel: always
  for "splash" (an error says what it cannot run), for "auto" on TPU where
  splash_lib.unsupported finds nothing missing. Only shapes are read: query / value may
  be jax.ShapeDtypeStruct, so a layer can ask before it has projected them."""
  if implementation not in ("auto", "splash"):
    return False
  why_not = splash_lib.unsupported(
      query, value, bias, None if isinstance(mask, SegmentMask) else mask, dropout_active)
  if implementation == "splash" and why_not:
    raise ValueError(f"model.attention_impl='splash' cannot run this attention: {why_not}.")
  return implementation == "splash" or (parallel.trace_platform() == "tpu" and not why_not)


def runs_cudnn(implementation: str, query, value, bias, mask, dropout_active: bool,
               dtype) -> bool:
  """Whether `dot_product_attention` takes cuDNN: always for "cudnn" (an error says what
  it cannot run), for "auto" when traced for a GPU and cudnn_lib.unsupported finds
  nothing missing. An active dropout is no warning: describe_path names it at start-up."""
  if implementation == "cudnn" or (implementation == "auto"
                                   and parallel.trace_platform() == "gpu"):
    why_not = cudnn_lib.unsupported(query, value, bias, mask, dropout_active, dtype)
    if implementation == "cudnn" and why_not:
      raise ValueError(f"model.attention_impl='cudnn' cannot run this attention: {why_not}.")
    if why_not and not dropout_active:
      cudnn_lib.warn_once(why_not)
    return not why_not
  return False


def describe_path(cfg, batch: int, seq_len: int, mesh=None, platform: str | None = None) -> str:
  """The attention path a model's training step takes at `seq_len` on `platform` (default:
  what parallel.trace_platform says), and why when it is not the fused kernel: what the
  run's start-up line prints for each phase, so `auto` never loses the kernel silently.

  cfg: a layers.config.TransformerConfig (training: dropout as configured); batch: the
  global rows; mesh: the run's (splash's split of rows and heads over it is checked).
  """
  platform = platform or (mesh.devices.flat[0].platform if mesh is not None
                          else parallel.trace_platform())
  platform = "gpu" if platform in ("cuda", "rocm") else platform
  shape = jax.ShapeDtypeStruct((batch, seq_len, cfg.num_heads, cfg.d_head), cfg.attention_dtype)
  dropout = cfg.attention_dropout_rate > 0.0
  bias = object() if cfg.position == "relative" else None  # only its presence is read
  impl = cfg.attention_impl
  if impl in ("reference", "xla"):
    return f"{impl} (model.attention_impl={impl!r})"
  fused = {"tpu": "splash", "gpu": "cudnn"}.get(platform)
  if impl == "auto" and fused is None:
    return f"xla (no fused kernel on {platform})"
  kernel = fused if impl == "auto" else impl
  if kernel == "splash":
    def ask():
      if mesh is None:
        return splash_lib.unsupported(shape, shape, bias, None, dropout)
      with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
        return splash_lib.unsupported(shape, shape, bias, None, dropout)
    why = parallel.with_trace_platform(platform, ask)()
  else:
    why = cudnn_lib.unsupported(shape, shape, bias, None, dropout, cfg.attention_dtype)
  if not why:
    return f"{kernel} (fused)"
  fallback = "reference" if dropout else "xla"
  return f"{fallback}, not {kernel}: {why}"


def describe_phases(cfg, batch: int, seq_lens, mesh=None) -> str:
  """The start-up line: "attention: S128 splash (fused) | S512 reference, not splash: ...",
  one entry per training phase (its sequence length). cfg: the task's model config; one
  that is not a Transformer's (the GRU) has no such choice: "attention: n/a"."""
  if not hasattr(cfg, "attention_impl"):
    return "attention: n/a (not a Transformer)"
  paths = [f"S{n} {describe_path(cfg, batch, n, mesh)}" for n in dict.fromkeys(seq_lens)]
  return "attention: " + " | ".join(paths)
