"""LayerNorm under a TransformerConfig: flax's nn.LayerNorm with float32 statistics and the
two-pass variance (as torch computes it, so imported weights give torch's values), and
logical axis names on its parameters ("scale", "bias": what checkpoints and the interop
mappings name); without a bias when config.norm_bias is False (ModernBERT)."""
from __future__ import annotations

import flax.linen as nn


def layer_norm(config, name: str) -> nn.Module:
  """The LayerNorm of a block or an embedding under TransformerConfig `config`."""
  return nn.LayerNorm(
      epsilon=config.layer_norm_eps, dtype=config.compute_dtype, param_dtype=config.params_dtype,
      use_fast_variance=False, use_bias=config.norm_bias, scale_init=config.ones_init("norm"),
      bias_init=config.zeros_init("norm"), name=name)
