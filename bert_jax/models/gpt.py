"""A decoder-only language model (GPT-2 layout: pre-LN, learned positions, tied output)."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.layers import attention as attn_lib
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from bert_jax.layers.stacks import Decoder

Array = jax.Array


class GPT(nn.Module):
  """Causal LM. With `config.decode`, feed one token (and its position) per call.

  `return_weights`: the causal attention matrices are sown into "intermediates".
  """
  config: TransformerConfig
  return_weights: bool = False

  def setup(self):
    cfg = self.config
    self.token_embedder = nn.Embed(cfg.vocab_size, cfg.hidden_size, dtype=cfg.compute_dtype,
                                   param_dtype=cfg.params_dtype,
                                   embedding_init=cfg.embed_init("vocab", "embed"))
    if cfg.position == "learned":
      self.position_embedder = LearnedPositionalEmbedding(cfg)
    elif cfg.position == "sinusoidal":
      self.position_embedder = SinusoidalPositionalEncoding(cfg.max_len, cfg.hidden_size)
    self.dropout = nn.Dropout(cfg.dropout_rate, deterministic=cfg.deterministic)
    self.decoder = Decoder(cfg, cross_attention=False, return_weights=self.return_weights)

  def __call__(self, input_ids: Array, input_mask: Array | None = None,
               positions: Array | None = None, packed_segment_ids: Array | None = None) -> Array:
    """input_ids [batch, len] -> next-token logits [batch, len, vocab] float32."""
    cfg = self.config
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(input_ids.shape[1]), input_ids.shape)
    x = self.token_embedder(input_ids)                          # [batch, len, d]
    if cfg.position in ("learned", "sinusoidal"):
      x = x + self.position_embedder(positions).astype(x.dtype)
    x = self.dropout(x)
    mask = None
    if not cfg.decode:
      if input_mask is not None:
        mask = attn_lib.padding_mask(input_mask)
      if packed_segment_ids is not None:
        mask = attn_lib.combine_masks(mask, attn_lib.segment_mask(packed_segment_ids))
    y, _ = self.decoder(x, self_mask=mask, positions=positions)
    return self.token_embedder.attend(y).astype(jnp.float32)


def init_cache(model: GPT, batch: int, max_len: int):
  """A zeroed KV cache for `model` (whose config has decode=True) of `max_len` slots."""
  ids = jnp.zeros((batch, max_len), jnp.int32)
  variables = jax.eval_shape(model.init, jax.random.key(0), ids)
  return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), variables["cache"])


def greedy_generate(model: GPT, params, prompt: Array, num_steps: int) -> Array:
  """Greedy continuation with the KV cache: prompt [batch, p] -> [batch, p + num_steps].

  The prompt is fed one token at a time through the cache too, so every step is the same
  compiled one-token program (`lax.fori_loop`).
  """
  if not model.config.decode:
    raise ValueError("greedy_generate needs a model whose config has decode=True.")
  batch, p = prompt.shape
  total = p + num_steps
  cache = init_cache(model, batch, total)
  tokens = jnp.zeros((batch, total), jnp.int32).at[:, :p].set(prompt)

  def step(i, carry):
    tokens, cache = carry
    tok = jax.lax.dynamic_slice_in_dim(tokens, i, 1, axis=1)    # [batch, 1]
    pos = jnp.full((batch, 1), i, jnp.int32)
    logits, mutated = model.apply({"params": params, "cache": cache}, tok, positions=pos,
                                  mutable=["cache"])
    predicted = jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)   # [batch]
    # Inside the prompt the next token is given; after it, the model's choice is written.
    given = jax.lax.dynamic_slice_in_dim(tokens, i + 1, 1, axis=1)[:, 0]
    nxt = jnp.where(i + 1 < p, given, predicted)
    tokens = jax.lax.dynamic_update_slice_in_dim(tokens, nxt[:, None], i + 1, axis=1)
    return tokens, mutated["cache"]

  tokens, _ = jax.lax.fori_loop(0, total - 1, step, (tokens, cache))
  return tokens
