"""The attention path a training step takes, in words: the run's start-up line."""
from __future__ import annotations

import jax

from bert_jax.kernels import cudnn as cudnn_lib
from bert_jax.kernels import flash_dropout as flash_dropout_lib
from bert_jax.kernels import splash as splash_lib
from bert_jax.kernels import window as window_lib
from bert_jax.runtime import tracing


def describe_path(cfg, batch: int, seq_len: int, mesh=None, platform: str | None = None,
                  window: int = 0) -> str:
  """The attention path a model's training step takes at `seq_len` on `platform` (default:
  what tracing.trace_platform says), and why when it is not the fused kernel: what the
  run's start-up line prints for each phase, so `auto` never loses the kernel silently.

  cfg: a layers.config.TransformerConfig (training: dropout as configured); batch: the
  global rows; mesh: the run's (the TPU kernels' split of rows and heads over it is
  checked). On TPU with attention dropout "auto" names flash_dropout, the kernel with it.
  window: describe a sliding-window layer's attention (masks.SegmentMask.window), named in
  the parentheses: "splash (fused, local window 64)".
  """
  platform = platform or (mesh.devices.flat[0].platform if mesh is not None
                          else tracing.trace_platform())
  platform = "gpu" if platform in ("cuda", "rocm") else platform
  shape = jax.ShapeDtypeStruct((batch, seq_len, cfg.num_heads, cfg.d_head), cfg.attention_dtype)
  dropout = cfg.attention_dropout_rate > 0.0
  bias = object() if cfg.position == "relative" else None  # only its presence is read
  impl = cfg.attention_impl
  local = f", local window {window}" if window else ""
  if impl in ("reference", "xla"):
    return f"{impl} (model.attention_impl={impl!r}{local})"
  fused = {"tpu": "splash", "gpu": "cudnn"}.get(platform)
  if impl == "auto" and fused is None:
    return f"xla (no fused kernel on {platform}{local})"
  kernel = fused if impl == "auto" else impl
  if impl == "auto" and kernel == "splash" and dropout:
    kernel = "flash_dropout"   # what "auto" takes on TPU for dropout (splash has none)
  if kernel in ("splash", "flash_dropout"):
    def unsupported():
      if kernel == "flash_dropout":
        return flash_dropout_lib.unsupported(shape, shape, bias, None)
      return splash_lib.unsupported(shape, shape, bias, None, dropout)
    def ask():
      if mesh is None:
        return unsupported()
      with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
        return unsupported()
    why = tracing.with_trace_platform(platform, ask)()
  else:
    why = cudnn_lib.unsupported(shape, shape, bias, window_lib.with_window(None, window), dropout,
                                cfg.attention_dtype)
  if not why:
    if kernel == "flash_dropout" and dropout:
      return (f"flash_dropout (fused{local}, attention dropout "
              f"{cfg.attention_dropout_rate:g} in the kernel: splash has none)")
    return f"{kernel} (fused{local})"
  fallback = "reference" if dropout else "xla"
  return f"{fallback}{f' (local window {window})' if window else ''}, not {kernel}: {why}"


def describe_phases(cfg, batch: int, seq_lens, mesh=None, window: int | None = None) -> str:
  """The start-up line: "attention: S128 splash (fused) | S512 flash_dropout (fused, ...)",
  one entry per training phase (its sequence length). cfg: the task's model config; one
  that is not a Transformer's (the GRU) has no such choice: "attention: n/a".

  window: the w (|i - j| <= w) of the model's local layers; default: half the config's
  local_window (HF's local_attention, both sides) where it has local_layers, else 0: none.
  Each entry then also names theirs after the global layers' path:
  "S128 splash (fused); splash (fused, local window 64)"."""
  if not hasattr(cfg, "attention_impl"):
    return "attention: n/a (not a Transformer)"
  if window is None:
    has_local = bool(window_lib.local_layers(cfg)) if hasattr(cfg, "local_window") else False
    window = cfg.local_window // 2 if has_local else 0
  def entry(n):
    local = f"; {describe_path(cfg, batch, n, mesh, window=window)}" if window else ""
    return f"S{n} {describe_path(cfg, batch, n, mesh)}{local}"
  return "attention: " + " | ".join(entry(n) for n in dict.fromkeys(seq_lens))
