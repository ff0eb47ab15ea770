"""Sampling continuations of batched prompts: temperature, top-k, top-p (nucleus), greedy.

Prompts of different lengths are left-aligned to a common width (row b padded on the left by
P - len_b slots) and prefilled in one step-function call with `valid` marking the real
slots: the step function masks the pad slots as keys and numbers each row's positions from
its first real token, so every row sees exactly what it would see alone.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from bert_jax.decoding.search import StepFn

Array = jax.Array


def filter_logits(logits: Array, temperature: float = 1.0, top_k: int = 0,
                  top_p: float = 1.0) -> Array:
  """logits [..., vocab] -> logits / temperature with the excluded tokens at -inf.

  Applied in the order of transformers' generate: temperature, then top-k (keep the k
  largest; 0 = off), then top-p on what remains (keep the fewest most likely tokens whose
  probability sums to >= top_p; the most likely token always stays). Ties at a cut-off are
  kept. Sampling from the result = sampling from the renormalized softmax over the kept set.
  """
  if temperature <= 0:
    raise ValueError(f"temperature={temperature} must be > 0 (use greedy decoding for 0).")
  if top_k < 0 or not 0.0 < top_p <= 1.0:
    raise ValueError(f"top_k={top_k} must be >= 0 and top_p={top_p} in (0, 1].")
  logits = logits.astype(jnp.float32) / temperature
  vocab = logits.shape[-1]
  if 0 < top_k < vocab:
    kth = jax.lax.top_k(logits, top_k)[0][..., -1:]                    # [..., 1]
    logits = jnp.where(logits < kth, -jnp.inf, logits)
  if top_p < 1.0:
    ordered = jnp.sort(logits, axis=-1)[..., ::-1]                       # descending
    probs = jax.nn.softmax(ordered, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs    # mass of the strictly more likely tokens
    keep = before < top_p                          # a prefix of the sorted order
    cutoff = jnp.min(jnp.where(keep, ordered, jnp.inf), axis=-1, keepdims=True)
    logits = jnp.where(logits < cutoff, -jnp.inf, logits)
  return logits


def choose_tokens(logits: Array, rng: Array | None, temperature: float, top_k: int,
                  top_p: float) -> Array:
  """logits [B, vocab] -> tokens [B] int32: argmax if temperature == 0 else a sample."""
  if temperature == 0:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  filtered = filter_logits(logits, temperature, top_k, top_p)
  return jax.random.categorical(rng, filtered, axis=-1).astype(jnp.int32)


def left_align(prompt: Array, prompt_lengths: Array, pad_id: int = 0) -> tuple[Array, Array]:
  """Right-padded prompt [B, P] + lengths [B] -> (left-padded ids [B, P], valid [B, P])."""
  width = prompt.shape[1]
  shift = width - prompt_lengths.astype(jnp.int32)                       # [B] pad slots
  slots = jnp.arange(width)[None, :]                                     # [1, P]
  src = slots - shift[:, None]                                           # [B, P]
  valid = src >= 0
  ids = jnp.take_along_axis(prompt, jnp.clip(src, 0, width - 1), axis=1)
  return jnp.where(valid, ids, pad_id).astype(jnp.int32), valid


def sample(step_fn: StepFn, cache: Any, prompt: Array, prompt_lengths: Array, *,
           max_new_tokens: int, rng: Array | None = None, temperature: float = 1.0,
           top_k: int = 0, top_p: float = 1.0, eos_id: int | None = None,
           pad_id: int = 0) -> Array:
  """Continues each prompt: returns the new tokens [B, max_new_tokens] int32.

  prompt [B, P] is right-padded (row b's tokens in prompt[b, :prompt_lengths[b]], every
  length >= 1); the step function must accept `valid=` (decoding/steps.py gpt_step_fn does)
  and its cache must have P + max_new_tokens slots. Only the last slot's logits are read, so
  the step may return [B, 1, V] (gpt_step_fn's last_only). temperature=0 is greedy (argmax, no rng
  needed), as is top_k=1. After EOS a row holds pad_id; the loop ends when all rows have
  ended. Step t draws with fold_in(rng, t) for the whole batch, so a sample depends on the
  batch it is in (greedy does not).
  """
  if temperature != 0 and rng is None:
    raise ValueError("sampling (temperature > 0) needs an rng key.")
  batch = prompt.shape[0]
  ids, valid = left_align(prompt, prompt_lengths, pad_id)
  logits, cache = step_fn(ids, cache, valid=valid)                       # prefill: one call
  logits = logits[:, -1].astype(jnp.float32)   # every row's last real token is in slot P-1

  def cond(state):
    i, _, done, _, _ = state
    return (i < max_new_tokens) & ~jnp.all(done)

  def body(state):
    i, out, done, logits, cache = state
    key = None if rng is None else jax.random.fold_in(rng, i)
    tokens = jnp.where(done, pad_id, choose_tokens(logits, key, temperature, top_k, top_p))
    out = jax.lax.dynamic_update_slice_in_dim(out, tokens[:, None], i, axis=1)
    if eos_id is not None:
      done = done | (tokens == eos_id)
    logits, cache = step_fn(tokens[:, None], cache)
    return i + 1, out, done, logits[:, -1].astype(jnp.float32), cache

  out = jnp.full((batch, max_new_tokens), pad_id, jnp.int32)
  state = (jnp.array(0, jnp.int32), out, jnp.zeros((batch,), bool), logits, cache)
  return jax.lax.while_loop(cond, body, state)[1]
