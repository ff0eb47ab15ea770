"""The encoder-decoder Transformer of Vaswani et al. (2017).

Shared source/target embeddings scaled by sqrt(d_model), sinusoidal positions, post-LN
blocks, and the output projection tied to the same embedding matrix (Sec. 3.4).
`encode` / `decode` are separate methods so decoding can run the encoder once and then
step the decoder with its KV cache (`config.decode=True`).

Packed rows (several sentence pairs in one row, batches by token count) pass segment
ids and positions: each segment attends within itself in the encoder and decoder, and
target segment k attends to source segment k only, so a packed pair computes what it
would alone.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.kernels import masks
from bert_jax.layers import dense as dense_lib
from bert_jax.layers import embedding as embedding_lib
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.embedding import embedding, vocab_logits
from bert_jax.layers.positional import SinusoidalPositionalEncoding
from bert_jax.layers.decoder import Decoder
from bert_jax.layers.stacks import Encoder

Array = jax.Array


def shift_right(targets: Array, bos_id: int = 0) -> Array:
  """Teacher forcing: decoder inputs are the targets shifted right by one, BOS first."""
  return jnp.pad(targets, ((0, 0), (1, 0)), constant_values=bos_id)[:, :-1]


def _default_positions(ids: Array) -> Array:
  return jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)


class Transformer(nn.Module):
  """Encoder-decoder Transformer. Padding id is 0 unless masks are given.

  `return_weights`: every attention matrix is sown into "intermediates" (encoder
  `attention`, decoder `self_attention` and `cross_attention`), for pictures.
  """
  config: TransformerConfig
  return_weights: bool = False

  def setup(self):
    cfg = self.config
    self.embedder = embedding(cfg, cfg.padded_vocab, "vocab")
    self.positional = SinusoidalPositionalEncoding(cfg.max_len, cfg.hidden_size)
    self.dropout = nn.Dropout(cfg.dropout_rate, deterministic=cfg.deterministic)
    self.encoder = Encoder(cfg.replace(decode=False), return_weights=self.return_weights)
    self.decoder = Decoder(cfg, cross_attention=True,
                           num_layers=cfg.num_decoder_layers or cfg.num_layers,
                           return_weights=self.return_weights)

  def _embed(self, ids: Array, positions: Array) -> Array:
    x = self.embedder(ids) * jnp.sqrt(self.config.hidden_size).astype(self.config.compute_dtype)
    return self.dropout(x + self.positional(positions).astype(x.dtype))  # [batch, len, d]

  def encode(self, src_ids: Array, src_mask: Array | None = None,
             src_positions: Array | None = None,
             src_segment_ids: Array | None = None) -> Array:
    """src_ids [batch, src_len] -> encoded [batch, src_len, d]."""
    src_mask = (src_ids > 0) if src_mask is None else src_mask
    positions = _default_positions(src_ids) if src_positions is None else src_positions
    x = self._embed(src_ids, positions)
    if src_segment_ids is None:
      mask = masks.SegmentMask(None, src_mask)                # real keys
    else:
      mask = masks.SegmentMask(src_segment_ids, src_segment_ids)  # within a segment
    encoded, _ = self.encoder(x, mask)
    return encoded

  def decode(self, encoded: Array, src_mask: Array, tgt_inputs: Array,
             tgt_mask: Array | None = None, tgt_positions: Array | None = None,
             src_segment_ids: Array | None = None,
             tgt_segment_ids: Array | None = None) -> Array:
    """Decoder logits [batch, tgt_len, vocab] float32 for the (shifted) target inputs.

    While decoding with the cache, pass one token per call and its position, and
    encoded=None once the cache holds the cross-attention keys/values (passing an encoder
    output then raises: it would not be used).
    """
    cfg = self.config
    positions = _default_positions(tgt_inputs) if tgt_positions is None else tgt_positions
    x = self._embed(tgt_inputs, positions)
    self_mask = None
    if tgt_segment_ids is not None and not cfg.decode:            # packed rows
      self_mask = masks.SegmentMask(tgt_segment_ids, tgt_segment_ids)
      cross_mask = masks.SegmentMask(tgt_segment_ids, src_segment_ids)  # pair k -> k
    else:
      if not cfg.decode and tgt_mask is not None:
        self_mask = masks.SegmentMask(tgt_mask, tgt_mask)     # both positions real
      cross_mask = masks.SegmentMask(None, src_mask)          # real source keys
    y, _ = self.decoder(x, encoded, self_mask=self_mask, cross_mask=cross_mask,
                        positions=positions)
    # The tied output projection (float32 logits), cut to the tokenizer's ids.
    return vocab_logits(embedding_lib.attend(cfg, self.embedder, y), cfg)

  def __call__(self, src_ids: Array, tgt_inputs: Array, src_mask: Array | None = None,
               tgt_mask: Array | None = None, src_segment_ids: Array | None = None,
               tgt_segment_ids: Array | None = None, src_positions: Array | None = None,
               tgt_positions: Array | None = None) -> Array:
    """Teacher-forced logits [batch, tgt_len, vocab]; segment ids/positions: packed rows."""
    src_mask = (src_ids > 0) if src_mask is None else src_mask
    encoded = self.encode(src_ids, src_mask, src_positions, src_segment_ids)
    return self.decode(encoded, src_mask, tgt_inputs, tgt_mask, tgt_positions,
                       src_segment_ids, tgt_segment_ids)
