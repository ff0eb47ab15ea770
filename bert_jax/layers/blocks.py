"""Transformer blocks: the position-wise FFN and the encoder block (post-/pre-LN), and the
residual wrapper the decoder block (layers/decoder.py) shares."""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from bert_jax.runtime import sharding
from bert_jax.layers.attention import MultiHeadAttention
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.norm import layer_norm
from bert_jax.layers import dense as dense_lib

Array = jax.Array

# The residual stream [batch, len, embed] at block edges: rows over the data axes, the
# positions over tensor (sharding.LOGICAL_RULES "residual_length").
RESIDUAL = ("batch", "residual_length", "embed")


def _gelu(x: Array) -> Array:  # in float32: 1 + erf cancels where erf is near -1
  x32 = x.astype(jnp.float32)
  return (x32 * (0.5 * (1.0 + lax.erf(x32 * 0.7071067811865476)))).astype(x.dtype)


ACTIVATIONS = {
    # BERT's exact GELU in PyTorch's erf form, rematerialized: its backward keeps x alone
    "gelu": jax.checkpoint(_gelu, prevent_cse=False),
    "gelu_tanh": functools.partial(jax.nn.gelu, approximate=True),
    "relu": jax.nn.relu,                                         # Vaswani et al.
}


class FeedForward(nn.Module):
  """FFN(x) = act(x W_1 + b_1) W_2 + b_2, with inner size f (4d by default)."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array) -> Array:
    cfg = self.config
    dense = functools.partial(dense_lib.FlatDense, use_bias=cfg.use_bias,  # nn.Dense's params
                              dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                              dot_general=dense_lib.for_config(cfg))
    h = dense(cfg.d_mlp, kernel_init=cfg.kernel_init("embed", "mlp"),
              bias_init=cfg.zeros_init("mlp"), name="wi")(x)          # [batch, len, mlp]
    h = sharding.constrain(h, ("batch", "length", "mlp"))
    h = ACTIVATIONS[cfg.activation](h)
    return dense(x.shape[-1], kernel_init=cfg.kernel_init("mlp", "embed"),
                 bias_init=cfg.zeros_init("embed"), name="wo")(h)     # [batch, len, embed]


class EncoderBlock(nn.Module):
  """Self-attention + FFN, each with residual, dropout and LayerNorm.

  `scanned`: called by `nn.scan`, so return (carry, per-layer output) instead of x.
  """
  config: TransformerConfig
  return_weights: bool = False  # sow attention matrices into "intermediates"
  scanned: bool = False
  collect_hidden: bool = False  # with scanned: emit each layer's output

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, bias: Array | None = None,
               positions: Array | None = None):
    """x [batch, len, d_model]; mask [batch, 1, len, len] bool; bias [.., heads, len, len]."""
    cfg = self.config
    return_weights = self.return_weights
    x = sharding.constrain(x, RESIDUAL)
    attn = MultiHeadAttention(cfg, name="attention")
    x = residual(cfg, x, lambda h: attn(h, mask=mask, bias=bias, positions=positions,
                                         return_weights=return_weights), "attention_norm")
    x = residual(cfg, x, FeedForward(cfg, name="mlp"), "mlp_norm")
    x = sharding.constrain(x, RESIDUAL)
    return block_output(x, self.scanned, self.collect_hidden)


def block_output(x: Array, scanned: bool, collect_hidden: bool):
  if scanned:  # nn.scan contract: (carry, per-step output)
    return x, (x if collect_hidden else None)
  return x


def residual(cfg: TransformerConfig, x: Array, fn, norm_name: str) -> Array:
  """post-LN: LN(x + drop(fn(x)));  pre-LN: x + drop(fn(LN(x))).

  Called inside a compact `__call__`, so the LayerNorm is created in that block's scope
  under `norm_name` and param paths stay flat (attention_norm, mlp_norm, ...).
  """
  norm = layer_norm(cfg, norm_name)
  drop = nn.Dropout(cfg.dropout_rate, deterministic=cfg.deterministic)
  if cfg.pre_ln:
    return x + drop(fn(norm(x)))
  return norm(x + drop(fn(x)))
