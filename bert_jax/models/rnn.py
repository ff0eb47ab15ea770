"""The RNN encoder-decoder with additive attention (Bahdanau et al. 2015): the baseline
the Transformer replaced.

Encoder: a bidirectional GRU over the source embeddings; annotation h_j = [→h_j; ←h_j].
Decoder: s_0 = tanh(W_s ←h_1); at step i the previous state s_{i-1} is the query of the
additive attention over the annotations (layers/attention.AdditiveAttention,
score(q, k) = v_aᵀ tanh(W_a [k; q])), giving the context c_i; then
s_i = GRU([E y_{i-1}; c_i], s_{i-1}) and the logits come from a tanh layer over
[s_i; c_i; E y_{i-1}] (the paper's deep output, with tanh in place of its maxout).

Decoding uses `encode` once and then `decode_step` one token at a time; its cache is
{"hidden": [B, H], "cross_encoded": [B, S, 2H], "cross_mask": [B, S]}, every leaf with
the batch (or beam) axis first and the encoder side under "cross_" keys, which is
bert_jax/decoding's cache convention: beam search expands and gathers it like any other.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.layers.additive import AdditiveAttention

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class GRUConfig:
  vocab_size: int = 512
  embed_dim: int = 128
  hidden_size: int = 256            # per direction in the encoder; the decoder's state
  attention_units: int = 256        # n' of W_a (the paper: 1000)
  dropout_rate: float = 0.1
  deterministic: bool = False


def _init(base, *names):
  return nn.with_logical_partitioning(base, names)


def _gru(features: int, name: str) -> nn.GRUCell:
  return nn.GRUCell(
      features, name=name,
      kernel_init=_init(nn.initializers.lecun_normal(), "embed", "mlp"),
      recurrent_kernel_init=_init(nn.initializers.orthogonal(), "kv", "mlp"),
      bias_init=_init(nn.initializers.zeros_init(), "mlp"))


def _dense(features: int, name: str, axes=("embed", "mlp"), use_bias: bool = True) -> nn.Dense:
  return nn.Dense(features, name=name, use_bias=use_bias,
                  kernel_init=_init(nn.initializers.xavier_uniform(), *axes),
                  bias_init=_init(nn.initializers.zeros_init(), axes[-1]))


class GRUSeq2Seq(nn.Module):
  """Bidirectional-GRU encoder, attentive GRU decoder; padding id 0."""
  config: GRUConfig

  def setup(self):
    cfg = self.config
    self.embedder = nn.Embed(cfg.vocab_size, cfg.embed_dim,
                             embedding_init=_init(nn.initializers.normal(cfg.embed_dim ** -0.5),
                                                  "vocab", "embed"))
    self.forward_rnn = nn.RNN(_gru(cfg.hidden_size, "forward_cell"), name="forward")
    self.backward_rnn = nn.RNN(_gru(cfg.hidden_size, "backward_cell"), reverse=True, keep_order=True,
                               name="backward")
    self.init_state = _dense(cfg.hidden_size, "init_state", ("kv", "mlp"))
    self.attention = AdditiveAttention(cfg.attention_units)
    self.decoder_cell = _gru(cfg.hidden_size, "decoder_cell")
    self.deep_output = _dense(cfg.embed_dim, "deep_output", ("mlp", "embed"))
    self.output = _dense(cfg.vocab_size, "output", ("embed", "vocab"))
    self.dropout = nn.Dropout(cfg.dropout_rate, deterministic=cfg.deterministic)

  def encode(self, src_ids: Array, src_mask: Array | None = None) -> dict:
    """src_ids [B, S] -> the decoding cache (see the module docstring), s_0 as its state."""
    src_mask = (src_ids > 0) if src_mask is None else src_mask
    lengths = jnp.sum(src_mask, axis=-1).astype(jnp.int32)            # [B]
    x = self.dropout(self.embedder(src_ids))                          # [B, S, E]
    fwd = self.forward_rnn(x, seq_lengths=lengths)                    # [B, S, H]
    bwd = self.backward_rnn(x, seq_lengths=lengths)                   # [B, S, H]
    encoded = jnp.concatenate([fwd, bwd], axis=-1)                    # [B, S, 2H]
    state = jnp.tanh(self.init_state(bwd[:, 0]))                      # [B, H]: s_0 from ←h_1
    return {"hidden": state, "cross_encoded": encoded, "cross_mask": src_mask}

  def decode_step(self, cache: dict, prev_ids: Array) -> tuple[Array, dict]:
    """prev_ids [B] (y_{i-1}) -> (logits [B, V] float32, cache with s_i)."""
    s_prev, encoded = cache["hidden"], cache["cross_encoded"]
    emb = self.dropout(self.embedder(prev_ids))                       # [B, E]
    mask = cache["cross_mask"][:, None, :]                              # [B, 1, S]
    context, _ = self.attention(s_prev[:, None, :], encoded, encoded, mask)
    context = context[:, 0]                                           # [B, 2H]
    state, _ = self.decoder_cell(s_prev, jnp.concatenate([emb, context], axis=-1))  # [B, H]
    hidden = jnp.tanh(self.deep_output(jnp.concatenate([state, context, emb], axis=-1)))
    logits = self.output(self.dropout(hidden)).astype(jnp.float32)    # [B, V]
    return logits, dict(cache, hidden=state)

  def decode(self, cache: dict, tgt_inputs: Array) -> Array:
    """Teacher forcing: tgt_inputs [B, T] (targets shifted right) -> logits [B, T, V]."""
    def body(module, carry, ids):
      logits, carry = module.decode_step(carry, ids)
      return carry, logits

    scan = nn.scan(body, variable_broadcast="params", split_rngs={"params": False,
                                                                  "dropout": True},
                   in_axes=1, out_axes=1)
    _, logits = scan(self, cache, tgt_inputs)
    return logits

  def __call__(self, src_ids: Array, tgt_inputs: Array, src_mask: Array | None = None) -> Array:
    return self.decode(self.encode(src_ids, src_mask), tgt_inputs)
