"""LayerNorm under a TransformerConfig: flax's nn.LayerNorm with float32 statistics, and
logical axis names on its parameters ("scale", "bias": what checkpoints and the interop
mappings name); without a bias when config.norm_bias is False (ModernBERT).

The variance: in float32 compute, two passes (the mean, then the mean square about it), as
torch computes it, so imported weights give torch's values. In a narrower compute dtype
(bf16 on TPU), one pass, E[x²] - E[x]² in float32: its cancellation error, about 2^-24 ·
E[x²] / var, is far below the inputs' own rounding (2^-9 for bf16) wherever a row's mean
is not hundreds of its standard deviations, and both sums then come from the pass that
reads x, which XLA fuses into the producing matmul's output, with no pass of their own
over the row (docs/performance-notes.md, "LayerNorm's variance in one pass")."""
from __future__ import annotations

import flax.linen as nn


def layer_norm(config, name: str) -> nn.Module:
  """The LayerNorm of a block or an embedding under TransformerConfig `config`."""
  return nn.LayerNorm(
      epsilon=config.layer_norm_eps, dtype=config.compute_dtype, param_dtype=config.params_dtype,
      use_fast_variance=config.compute_dtype.itemsize < 4, use_bias=config.norm_bias,
      scale_init=config.ones_init("norm"), bias_init=config.zeros_init("norm"), name=name)
