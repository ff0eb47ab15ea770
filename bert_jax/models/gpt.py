"""A decoder-only language model (GPT-2 layout: pre-LN, learned positions, tied output)."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.kernels import masks
from bert_jax.layers import dense as dense_lib
from bert_jax.layers import embedding as embedding_lib
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.embedding import embedding, vocab_logits
from bert_jax.layers.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from bert_jax.layers.decoder import Decoder

Array = jax.Array


class GPT(nn.Module):
  """Causal LM. With `config.decode`, each call appends its tokens to the KV cache; give
  their positions (see bert_jax/decoding for the step functions built on this).

  `return_weights`: the causal attention matrices are sown into "intermediates".
  """
  config: TransformerConfig
  return_weights: bool = False

  def setup(self):
    cfg = self.config
    self.token_embedder = embedding(cfg, cfg.padded_vocab, "vocab")
    if cfg.position == "learned":
      self.position_embedder = LearnedPositionalEmbedding(cfg)
    elif cfg.position == "sinusoidal":
      self.position_embedder = SinusoidalPositionalEncoding(cfg.max_len, cfg.hidden_size)
    self.dropout = nn.Dropout(cfg.dropout_rate, deterministic=cfg.deterministic)
    self.decoder = Decoder(cfg, cross_attention=False, return_weights=self.return_weights)

  def __call__(self, input_ids: Array, input_mask: Array | None = None,
               positions: Array | None = None, packed_segment_ids: Array | None = None,
               last_only: bool = False) -> Array:
    """input_ids [batch, len] -> next-token logits [batch, len, vocab] float32.

    last_only: the last position's logits only, [batch, 1, vocab]: what a decoding prefill
    needs. The output projection is the largest matmul of a GPT (vocab x d), so a prompt
    of P tokens saves P - 1 rows of it (XLA does not narrow the dot to the slice itself).
    """
    cfg = self.config
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(input_ids.shape[1]), input_ids.shape)
    x = self.token_embedder(input_ids)                          # [batch, len, d]
    if cfg.position in ("learned", "sinusoidal"):
      x = x + self.position_embedder(positions).astype(x.dtype)
    x = self.dropout(x)
    mask = None
    if not cfg.decode:
      mask = masks.row_mask(input_mask, packed_segment_ids)  # the decoder adds causal
    elif input_mask is not None:
      # Decoding: input_mask [batch, cache_len] marks the cache slots holding real tokens
      # (left-padded prompts); the cache adds causality over the slots written so far.
      mask = masks.padding_mask(input_mask)                  # [batch, 1, 1, cache_len]
    y, _ = self.decoder(x, self_mask=mask, positions=positions)
    if last_only:
      y = y[:, -1:]                                             # [batch, 1, d]
    # The tied output projection (float32 logits), cut to the tokenizer's ids.
    return vocab_logits(embedding_lib.attend(cfg, self.token_embedder, y), cfg)

