"""The decoder: causal self-attention (+ KV cache), optional cross-attention, FFN, in
blocks stacked like the encoder's (GPT: no cross-attention; the Vaswani model: with)."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.kernels import masks
from bert_jax.layers.kv_cache import CachedAttention
from bert_jax.layers.blocks import RESIDUAL, FeedForward, block_output, residual
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.norm import layer_norm
from bert_jax.layers.positional import RelativePositionBias
from bert_jax.layers.stacks import run_layers
from bert_jax.runtime import sharding

Array = jax.Array


class DecoderBlock(nn.Module):
  """Causal self-attention (+ KV cache), optional cross-attention, FFN."""
  config: TransformerConfig
  cross_attention: bool = True
  return_weights: bool = False
  scanned: bool = False
  collect_hidden: bool = False

  @nn.compact
  def __call__(self, x: Array, encoded: Array | None = None, self_mask: Array | None = None,
               cross_mask: Array | None = None, self_bias: Array | None = None,
               positions: Array | None = None):
    """x [batch, len, d]; encoded [batch, src_len, d]; masks as in EncoderBlock."""
    cfg = self.config
    return_weights = self.return_weights
    x = sharding.constrain(x, RESIDUAL)
    self_attn = CachedAttention(cfg, causal=True, name="self_attention")
    x = residual(cfg, x, lambda h: self_attn(h, mask=self_mask, bias=self_bias,
                                              positions=positions,
                                              return_weights=return_weights),
                  "self_attention_norm")
    if self.cross_attention:
      if encoded is None and not cfg.decode:
        raise ValueError("DecoderBlock(cross_attention=True) needs the encoder output.")
      # Cross-attention keys are encoder positions: no rotary there. While decoding, their
      # keys/values are projected once and cached (encoded may then be None).
      cross = CachedAttention(cfg.replace(position="none"), cross=True,
                                 name="cross_attention")
      x = residual(cfg, x, lambda h: cross(h, encoded, mask=cross_mask,
                                            return_weights=return_weights),
                    "cross_attention_norm")
    x = residual(cfg, x, FeedForward(cfg, name="mlp"), "mlp_norm")
    x = sharding.constrain(x, RESIDUAL)
    return block_output(x, self.scanned, self.collect_hidden)


class Decoder(nn.Module):
  """A stack of causal DecoderBlocks, with cross-attention for encoder-decoder models.

  With `config.decode` the self-attention layers read and write a KV cache and the
  causal mask comes from the cache index; otherwise causality is added here to the given
  padding/segment mask (a SegmentMask keeps it as a flag, for splash attention).
  """
  config: TransformerConfig
  cross_attention: bool = True
  num_layers: int | None = None
  return_weights: bool = False

  @nn.compact
  def __call__(self, x: Array, encoded: Array | None = None, self_mask: Array | None = None,
               cross_mask: Array | None = None, positions: Array | None = None,
               output_hidden_states: bool = False):
    """x [batch, len, d]; encoded [batch, src_len, d]; positions [batch, len] (absolute).

    Returns (output [batch, len, d], hidden states or None).
    """
    cfg = self.config
    length = x.shape[1]
    if not cfg.decode:
      self_mask = masks.add_causal(self_mask, length)
    bias = None
    if cfg.position == "relative":
      rel = RelativePositionBias(cfg, bidirectional=False, name="relative_bias")
      if cfg.decode:
        # Keys are cache slots 0..max_len-1 (attention trims to the cache's length) and
        # queries start at the cache slot being written, which this stack counts itself:
        # with left-padded prompts the rows' positions differ but their slot distances
        # (all a relative bias sees) do not.
        started = self.has_variable("cache", "cache_index")
        slot = self.variable("cache", "cache_index", lambda: jnp.array(0, jnp.int32))
        offset = slot.value
        if started:
          slot.value = offset + length
        bias = rel(length, cfg.max_len, query_offset=offset)
      else:
        bias = rel(length, length)
    num_layers = self.num_layers or cfg.num_layers
    x, hidden = run_layers(
        self, DecoderBlock, num_layers, x, (encoded, self_mask, cross_mask, bias, positions),
        {"cross_attention": self.cross_attention, "return_weights": self.return_weights},
        output_hidden_states)
    if cfg.pre_ln:
      x = layer_norm(cfg, "final_norm")(x)
    return x, hidden


# ------------------------------------------------------------ scan <-> unrolled params
