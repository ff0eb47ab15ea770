"""Sliding-window attention as a mask: what a local layer (ModernBERT's) passes to
kernels.attention. Every path takes it: the reference and XLA as the dense band
(SegmentMask.dense), splash as its LocalMask, flash_dropout in the kernel, cuDNN as its
sliding window when causal, else as a dense band mask (kernels/cudnn.py says why).

The window is on positions in the row: query i may attend key j when |i - j| <= w (and
the rest of the mask allows it). In packed rows the documents are contiguous, so that is
the distance inside the document. It is static, like `causal`: the fused kernels are
specialised on it.
"""
from __future__ import annotations

from bert_jax.kernels.masks import SegmentMask


def with_window(mask, window: int):
  """mask AND |i - j| <= window, kept as a SegmentMask: what a sliding-window layer
  passes (`with_window(row_mask(...), w)`). mask: a SegmentMask or None (every key);
  window 0 leaves it global (None stays None). Bools are refused: their window would be
  dense, which the fused kernels cannot take."""
  if mask is not None and not isinstance(mask, SegmentMask):
    raise TypeError(f"with_window takes a SegmentMask or None, not {type(mask).__name__}")
  if window < 0:
    raise ValueError(f"a local attention window is >= 0 (0: global), got {window}")
  if mask is None and not window:
    return None
  return (mask or SegmentMask()).replace(window=int(window))


def local_layers(cfg) -> tuple[int, ...]:
  """The sliding-window layers of TransformerConfig `cfg`: all but every global_every-th
  (layer 0 global), none without a local_window (ModernBERT's rule)."""
  if not cfg.local_window:
    return ()
  return tuple(i for i in range(cfg.num_layers) if i % cfg.global_every)
