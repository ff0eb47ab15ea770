"""LayerNorm under a TransformerConfig: flax's nn.LayerNorm, float32 statistics, logical axis
names on its parameters, no bias when config.norm_bias is False. Variance: torch's two passes
in float32 compute (imported weights give torch's values), one fused pass under bf16, E[x²] -
E[x]² in float32 (docs/performance-notes.md, "LayerNorm's variance in one pass")."""
from __future__ import annotations

import flax.linen as nn


def layer_norm(config, name: str) -> nn.Module:
  """The LayerNorm of a block or an embedding under TransformerConfig `config`."""
  return nn.LayerNorm(
      epsilon=config.layer_norm_eps, dtype=config.compute_dtype, param_dtype=config.params_dtype,
      use_fast_variance=config.compute_dtype.itemsize < 4, use_bias=config.norm_bias,
      scale_init=config.ones_init("norm"), bias_init=config.zeros_init("norm"), name=name)
