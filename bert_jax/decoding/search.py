"""Greedy and beam search over a step function (see bert_jax/decoding/__init__.py).

Both feed `bos_ids` first and return the generated tokens after it: EOS included where it
was produced, `pad_id` after it. They are traceable, not jitted: jit the function that
builds the step function from its params (decoding/steps.py does) so params stay arguments.
Loops are `lax.while_loop`s that stop as soon as every row is finished.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from bert_jax.decoding.cache import expand_beams, gather_beams

Array = jax.Array
StepFn = Callable[..., tuple[Array, Any]]

# Finite "minus infinity" for scores: -inf would give NaN in -inf - (-inf) and in top_k ties.
NEG = -1.0e9


def length_penalty(length: Array, alpha: float) -> Array:
  """GNMT (Wu et al. 2016, eq. 14): lp(Y) = ((5 + |Y|) / 6)^alpha."""
  return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def _row_limits(row_max_len: Array | None, batch: int, max_len: int) -> Array:
  """Per-row length limit [batch] int32, at least 1 and at most max_len."""
  if row_max_len is None:
    return jnp.full((batch,), max_len, jnp.int32)
  return jnp.clip(jnp.asarray(row_max_len, jnp.int32), 1, max_len)


def _next_logits(step_fn: StepFn, tokens: Array, cache: Any) -> tuple[Array, Any]:
  """One decode step: tokens [batch] -> (logits [batch, vocab] float32, cache)."""
  logits, cache = step_fn(tokens[:, None].astype(jnp.int32), cache)  # [batch, 1, vocab]
  return logits[:, -1].astype(jnp.float32), cache


def _is_eos(tokens: Array, eos_id: int | None) -> Array:
  if eos_id is None:
    return jnp.zeros(tokens.shape, bool)
  return tokens == eos_id


def greedy_search(step_fn: StepFn, cache: Any, bos_ids: Array, *, max_len: int,
                  eos_id: int | None, pad_id: int = 0,
                  row_max_len: Array | None = None) -> Array:
  """Argmax decoding: bos_ids [B] -> sequences [B, max_len] int32.

  A row stops after EOS or after row_max_len[b] tokens; its later slots hold pad_id.
  eos_id=None never stops early (benchmarks).
  """
  batch = bos_ids.shape[0]
  limit = _row_limits(row_max_len, batch, max_len)

  def cond(state):
    i, _, _, done, _ = state
    return (i < max_len) & ~jnp.all(done)

  def body(state):
    i, seqs, tokens, done, cache = state
    logits, cache = _next_logits(step_fn, tokens, cache)
    nxt = jnp.argmax(logits, axis=-1).astype(jnp.int32)                # [B]
    nxt = jnp.where(done, pad_id, nxt)
    seqs = jax.lax.dynamic_update_slice_in_dim(seqs, nxt[:, None], i, axis=1)
    done = done | _is_eos(nxt, eos_id) | (i + 1 >= limit)
    return i + 1, seqs, nxt, done, cache

  seqs = jnp.full((batch, max_len), pad_id, jnp.int32)
  state = (jnp.array(0, jnp.int32), seqs, bos_ids.astype(jnp.int32),
           jnp.zeros((batch,), bool), cache)
  return jax.lax.while_loop(cond, body, state)[1]


def beam_search(step_fn: StepFn, cache: Any, bos_ids: Array, *, beam_size: int, max_len: int,
                eos_id: int | None, alpha: float = 0.6, row_max_len: Array | None = None,
                pad_id: int = 0) -> tuple[Array, Array]:
  """Beam search with finished hypotheses kept and the GNMT length penalty.

  Returns (sequences [B, beam, max_len] int32, scores [B, beam] float32), best first; a
  score is log P(Y) / lp(|Y|) with |Y| counting EOS. Each step extends the `beam_size`
  live hypotheses by every token and keeps the best 2*beam extensions (at most beam of them
  end in EOS, so beam live ones always remain). Extensions ending in EOS, or reaching the
  row's limit row_max_len[b], join the row's finished set (best beam_size kept). A row is
  done at its limit or when its best live log-prob, penalized as if it ran to the limit
  (the most that lp can help it: log-probs only fall, lp only grows), cannot beat its
  worst finished score. With alpha=0 and beam 1 this returns the greedy sequence or a
  finished one scoring higher.
  """
  if alpha < 0:
    raise ValueError(f"alpha={alpha}: the early-stopping bound needs alpha >= 0.")
  batch, k = bos_ids.shape[0], beam_size
  limit = _row_limits(row_max_len, batch, max_len)                     # [B]
  cache = expand_beams(cache, k)
  take = lambda x, idx: jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)),
                                            axis=1)

  def cond(state):
    return (state["i"] < max_len) & ~jnp.all(state["done"])

  def body(state):
    i, done = state["i"], state["done"]
    logits, cache = _next_logits(step_fn, state["tokens"].reshape(-1), state["cache"])
    vocab = logits.shape[-1]
    logp = jax.nn.log_softmax(logits).reshape(batch, k, vocab)
    cand = (state["alive_logp"][..., None] + logp).reshape(batch, k * vocab)
    top_logp, top_idx = jax.lax.top_k(cand, 2 * k)                      # [B, 2k]
    parent, token = top_idx // vocab, (top_idx % vocab).astype(jnp.int32)
    seqs = take(state["alive_seqs"], parent)                            # [B, 2k, max_len]
    seqs = jax.lax.dynamic_update_slice_in_dim(seqs, token[..., None], i, axis=2)
    length = i + 1
    eos = _is_eos(token, eos_id)

    # Live set: the best k extensions that did not end in EOS.
    alive_logp, a_idx = jax.lax.top_k(jnp.where(eos, NEG, top_logp), k)   # [B, k]
    new_cache = gather_beams(cache, take(parent, a_idx), k)

    # Finished set: merge this step's endings into the kept ones (done rows take no more).
    ended = (eos | (length >= limit)[:, None]) & ~done[:, None]          # [B, 2k]
    new_scores = jnp.where(ended, top_logp / length_penalty(length, alpha), NEG)
    scores, f_idx = jax.lax.top_k(
        jnp.concatenate([state["fin_scores"], new_scores], axis=1), k)
    fin_seqs = take(jnp.concatenate([state["fin_seqs"], seqs], axis=1), f_idx)
    fin_flags = take(jnp.concatenate([state["fin_flags"], ended], axis=1), f_idx)

    bound = alive_logp[:, 0] / length_penalty(limit, alpha)              # [B]
    hopeless = jnp.all(fin_flags, axis=1) & (scores[:, -1] >= bound)
    return {"i": length, "tokens": take(token, a_idx), "alive_seqs": take(seqs, a_idx),
            "alive_logp": alive_logp, "fin_seqs": fin_seqs, "fin_scores": scores,
            "fin_flags": fin_flags, "done": done | (length >= limit) | hopeless,
            "cache": new_cache}

  # All k beams start as the same BOS; only the first is live, or the first step would
  # fill the beam with k copies of each extension.
  first = jnp.where(jnp.arange(k) == 0, 0.0, NEG).astype(jnp.float32)
  state = {
      "i": jnp.array(0, jnp.int32),
      "tokens": jnp.repeat(bos_ids.astype(jnp.int32)[:, None], k, axis=1),   # [B, k]
      "alive_seqs": jnp.full((batch, k, max_len), pad_id, jnp.int32),
      "alive_logp": jnp.broadcast_to(first, (batch, k)),
      "fin_seqs": jnp.full((batch, k, max_len), pad_id, jnp.int32),
      "fin_scores": jnp.full((batch, k), NEG, jnp.float32),
      "fin_flags": jnp.zeros((batch, k), bool),
      "done": jnp.zeros((batch,), bool),
      "cache": cache,
  }
  state = jax.lax.while_loop(cond, body, state)
  return state["fin_seqs"], state["fin_scores"]
