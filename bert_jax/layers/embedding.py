"""Embedding tables (tokens, positions, segments) and the tied output layer that reads the
token table back: logits over the tokenizer's ids only."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.layers import dense as dense_lib
from bert_jax.layers.config import TransformerConfig
from bert_jax.runtime import sharding


def embedding(config: TransformerConfig, num_embeddings: int, logical_rows: str,
              name: str | None = None) -> nn.Embed:
  """A [num_embeddings, hidden] table (tokens, positions, segments) with logical names
  (`logical_rows`, "embed") and the model's init and dtypes."""
  return nn.Embed(num_embeddings, config.hidden_size, dtype=config.compute_dtype,
                  param_dtype=config.params_dtype,
                  embedding_init=config.embed_init(logical_rows, "embed"), name=name)


def vocab_logits(logits, config: TransformerConfig):
  """[..., padded_vocab] -> [..., vocab_size]: logits over the tokenizer's ids only, so a
  loss, an accuracy, a top-k or a sample never sees a padding row.

  Under a mesh the rows are first spread over every mesh axis (the layout the steps' loss
  uses anyway, sharding.spread_over_all_devices): the vocabulary dimension is then whole on
  each chip and the cut is local, not a resharding of a tensor-split dimension.
  """
  if logits.shape[-1] == config.vocab_size:
    return logits
  if not jax.sharding.get_abstract_mesh().empty:
    logits = sharding.spread_rows(logits)
  return logits[..., :config.vocab_size]


def attend(cfg, embedder, x, logits_dtype=jnp.float32):
  """A tied output layer: x [..., d] · embedder.embeddingᵀ -> logits [..., vocab] in
  logits_dtype (None: the product's own, x's compute dtype; float32 with
  cfg.matmul_dtype), the operands in cfg.matmul_dtype if set (else flax's Embed.attend)."""
  if cfg.matmul_dtype is not None:
    return dense_lib.cast_dot_general(jnp.dtype(cfg.matmul_dtype), x, embedder.embedding,
                                      (((x.ndim - 1,), (1,)), ((), ())))       # float32
  logits = embedder.attend(x)
  return logits if logits_dtype is None else logits.astype(logits_dtype)
