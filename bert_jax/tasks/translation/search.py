"""Translating id batches with the shared searches of bert_jax/decoding.

The Transformer goes through `decoding.seq2seq_generate` (encoder once, cross-attention
K/V cached, self-attention KV cache). The GRU baseline supplies its own step function to
the same `greedy_search` / `beam_search`: its cache is the model's
{"hidden", "cross_encoded", "cross_mask"} dict (models/rnn.py), batch axis first.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from bert_jax import decoding
from bert_jax.tasks.translation.data import BOS, EOS, PAD

Array = jax.Array


def gru_step_fn(model, params):
  """step(ids [B, T], cache) -> (logits [B, T, V] float32, cache), one GRU step per token."""
  def step(ids: Array, cache: dict, valid: Array | None = None):
    if valid is not None:
      raise ValueError("GRU decoding starts from BOS; target prompts are not supported.")

    def one(c, tokens):                                               # tokens [B]
      logits, c = model.apply({"params": params}, c, tokens, method="decode_step")
      return c, logits

    cache, logits = jax.lax.scan(one, cache, ids.T)                   # [T, B, V]
    return jnp.swapaxes(logits, 0, 1), cache

  return step


def translate_ids(model, architecture: str, params, src_ids: Array, *, beam_size: int,
                  alpha: float, max_len: int, max_extra_length: int) -> Array:
  """src_ids [B, S] (0-padded) -> best hypotheses [B, max_len]: </s>-terminated, 0 after.

  beam_size 1 is greedy search. A row has at most min(max_len, its source length +
  max_extra_length) tokens.
  """
  src_mask = src_ids > 0                                              # [B, S]
  method = "greedy" if beam_size <= 1 else "beam"
  if architecture == "transformer":
    seqs, _ = decoding.seq2seq_generate(
        model, params, src_ids, src_mask, max_len=max_len, bos_id=BOS, eos_id=EOS,
        method=method, beam_size=max(beam_size, 1), alpha=alpha, extra_len=max_extra_length,
        pad_id=PAD)
    return seqs
  cache = model.apply({"params": params}, src_ids, src_mask, method="encode")
  step = gru_step_fn(model, params)
  bos = jnp.full((src_ids.shape[0],), BOS, jnp.int32)
  row_max_len = src_mask.sum(axis=1, dtype=jnp.int32) + max_extra_length
  if method == "greedy":
    return decoding.greedy_search(step, cache, bos, max_len=max_len, eos_id=EOS,
                                  pad_id=PAD, row_max_len=row_max_len)
  seqs, _ = decoding.beam_search(step, cache, bos, beam_size=beam_size, max_len=max_len,
                                 eos_id=EOS, alpha=alpha, row_max_len=row_max_len,
                                 pad_id=PAD)
  return seqs[:, 0]                                                   # best first
