"""cuDNN flash attention on NVIDIA GPUs, fed mask types rather than a dense bias.

`jax.nn.dot_product_attention(..., implementation="cudnn")` (jax 0.10.2) turns a boolean
`mask` into an additive bias and then always exports that bias's gradient
(`combine_bias_and_mask`, `should_export_dbias` in jax/_src/cudnn/
fused_attention_stablehlo.py): a [batch, 1, q_len, kv_len] read and a same-size write per
layer and step, and no causal block skipping. So the mask goes in as what cuDNN has
natively (`arguments`):
- key padding (a SegmentMask with kv_ids only) -> key_value_seq_lengths, cuDNN's PADDING
  mask type. The real keys must come first (trailing padding, as every data pipeline here
  writes rows); a row with no real key gets length 1 (cuDNN's output for length 0 is not
  defined; such a row is padding and its output is masked downstream);
- causal -> is_causal, cuDNN's CAUSAL / PADDING_CAUSAL mask type (blocks above the
  diagonal are skipped);
- packed rows (q_ids) -> a dense [batch, 1, q_len, kv_len] mask: jax 0.10.2's public
  function takes no segment ids. (Its private cudnn function takes q/kv offsets, but only
  on Hopper, with a static maximum number of segments per row.) That mask becomes a bias
  with an exported gradient, still far less than the XLA path's float32 [batch, heads,
  q_len, kv_len] scores; causal stays the mask type even then.
- a bias only where the model has one (relative positions);
- a sliding window (SegmentMask.window w): causal -> local_window_size (w, 0), cuDNN's
  sliding window (blocks outside it skipped). jax 0.10.2 raises on a right window when
  not causal (cuDNN takes a left window only), so a two-sided window (|i - j| <= w,
  ModernBERT's local layers) goes in as packed rows do, the band (with the row's padding
  and segments) as a dense mask: still the fused kernel, whose [batch, 1, q_len, kv_len]
  bias read and gradient write are far less than XLA's [batch, heads, q_len, kv_len]
  float32 scores, but no block is skipped.

Attention dropout: the public function has none (the private one takes a static Python
seed, so the same dropout pattern every step unless XLA varies it, which nothing here can
check without a GPU), so an active attention dropout takes the written-out path, and the
run's start-up line says so (kernels.describe_path).
"""
from __future__ import annotations

import logging

import jax
import jax.numpy as jnp

from bert_jax.kernels import masks as masks_lib

Array = jax.Array

MIN_CAPABILITY = (8, 0)       # cuDNN flash attention: Ampere or newer
HOPPER = (9, 0)               # jax lets head sizes up to 256 through from here on
_warned: set[str] = set()


def compute_capability() -> tuple[int, int] | None:
  """The first local CUDA device's compute capability, e.g. (9, 0); None where no CUDA
  device is present (a program lowered for cuda on a CPU host)."""
  try:
    devices = jax.local_devices(backend="gpu")
  except RuntimeError:  # no GPU backend at all
    return None
  cc = getattr(devices[0], "compute_capability", None) if devices else None
  if not cc:
    return None
  major, minor = (int(x) for x in str(cc).split(".")[:2])
  return major, minor


def max_head_dim(capability: tuple[int, int] | None) -> int:
  """jax's rule (check_is_flash_attention): <= 256 on Hopper or later, else <= 128; with no
  device to ask, 128, as jax's own check then assumes."""
  return 256 if capability is not None and capability >= HOPPER else 128


def unsupported(query, value, bias, mask, dropout_active: bool, dtype,
                capability: tuple[int, int] | None = None) -> str:
  """Why cuDNN cannot compute this attention ("" when it can). Reads shapes only, so
  query / value may be jax.ShapeDtypeStruct. `capability` None: compute_capability()."""
  capability = capability if capability is not None else compute_capability()
  if dropout_active:
    return ("jax 0.10.2's cuDNN attention has no attention dropout: set "
            "model.attention_dropout_rate=0 for the fused kernel")
  if jnp.dtype(dtype) not in (jnp.bfloat16, jnp.float16):
    return f"cuDNN flash attention runs in bfloat16 / float16, not {jnp.dtype(dtype).name}"
  d_k, d_v = query.shape[-1], value.shape[-1]
  if d_k != d_v:
    return f"it needs d_k == d_v here, got {d_k} and {d_v}"
  limit = max_head_dim(capability)
  if d_k % 8 or d_k > limit:
    return f"the head size must be a multiple of 8 and <= {limit} on this GPU, got {d_k}"
  if capability is not None and capability < MIN_CAPABILITY:
    return (f"compute capability {capability[0]}.{capability[1]} is below cuDNN flash "
            f"attention's {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} (Ampere)")
  dense = mask is not None and not (isinstance(mask, masks_lib.SegmentMask)
                                    and mask.q_ids is None and not _two_sided(mask))
  if (bias is not None or dense) and (query.shape[1] % 2 or value.shape[1] % 2):
    # jax: training with a bias (a dense mask is one) needs even lengths.
    return f"with a bias or packed rows the lengths must be even, got {query.shape[1]}"
  return ""


def warn_once(why: str) -> None:
  """One warning per reason per process: `auto` taking XLA on a GPU is never silent."""
  if why not in _warned:
    _warned.add(why)
    logging.warning("attention: XLA instead of cuDNN flash attention: %s.", why)


def arguments(mask, q_len: int, kv_len: int) -> dict:
  """The keyword arguments of jax.nn.dot_product_attention that express `mask`.

  mask: a masks.SegmentMask, bools broadcastable to [batch, 1, q_len, kv_len], or None.
  Returns a dict of some of mask / is_causal / key_value_seq_lengths ([batch] int32) /
  local_window_size ((left, right): jax's meaning; cuDNN takes only (w, 0), see top).
  """
  if mask is None:
    return {}
  if not isinstance(mask, masks_lib.SegmentMask):
    return {"mask": mask}
  if _two_sided(mask):  # the band, padding and segments as bools (see top)
    return {"mask": mask.dense(q_len, kv_len)}
  args = {"is_causal": True} if mask.causal else {}
  if mask.window:
    args["local_window_size"] = (mask.window, 0 if mask.causal else mask.window)
  if mask.kv_ids is None:
    return args
  if mask.q_ids is None:  # key padding: the number of real keys, at least 1
    lengths = jnp.sum(mask.kv_ids > 0, axis=-1, dtype=jnp.int32)       # [batch]
    args["key_value_seq_lengths"] = jnp.maximum(lengths, 1)
    return args
  # Packed rows: the block-diagonal mask as bools; causality stays the mask type.
  args["mask"] = masks_lib.segment_mask(mask.q_ids, mask.kv_ids)     # [batch, 1, q, kv]
  return args


def _two_sided(mask) -> bool:
  return isinstance(mask, masks_lib.SegmentMask) and bool(mask.window) and not mask.causal


def attention(query: Array, key: Array, value: Array, bias: Array | None, mask,
              dtype) -> Array:
  """softmax(Q K^T / sqrt(d) + bias) V by cuDNN. query [batch, q_len, heads, d], key /
  value [batch, kv_len, heads, d]; returns [batch, q_len, heads, d]."""
  q, k, v = (x.astype(dtype) for x in (query, key, value))
  args = arguments(mask, q.shape[1], k.shape[1])
  if "mask" in args:
    m = args["mask"]  # the fused kernel wants it broadcastable to [batch, heads, q, kv]
    args["mask"] = jnp.broadcast_to(m, (q.shape[0], m.shape[1], q.shape[1], k.shape[1]))
  if bias is not None:
    bias = bias.astype(dtype)
  return jax.nn.dot_product_attention(q, k, v, bias=bias, implementation="cudnn", **args)
