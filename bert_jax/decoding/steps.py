"""Step functions and caches for our models, and the jitted generate entry points.

`gpt_step_fn` / `seq2seq_step_fn` close over a decode-mode copy of the model (decode=True,
deterministic=True: callers pass the training model) and its params. Their caches are
dicts around the Flax "cache" collection (`model`) with a shared slot counter (`index`);
the encoder-decoder's also holds the source mask (`cross_mask`, with the cross-attention
keys/values primed once by `seq2seq_init_cache`), GPT's the per-row key validity over the
cache slots (`valid`) and the count of real tokens so far (`count`, the next position).
"""
from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.decoding.cache import is_cross
from bert_jax.decoding.sampling import sample
from bert_jax.decoding.search import beam_search, greedy_search

Array = jax.Array


def decode_model(model: nn.Module) -> nn.Module:
  """The same model with decode=True (KV cache) and deterministic=True (no dropout)."""
  return model.clone(config=model.config.replace(decode=True, deterministic=True))


def _zeros_like(shapes):
  return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


# ------------------------------------------------------------------------------ GPT
def gpt_init_cache(model: nn.Module, batch: int, length: int) -> dict:
  """An empty cache of `length` slots (prompt width + new tokens) for `batch` rows."""
  dm = decode_model(model)
  if dm.config.position in ("learned", "sinusoidal") and length > dm.config.max_len:
    raise ValueError(f"{length} cache slots exceed the model's {dm.config.max_len} positions.")
  ids = jnp.zeros((batch, length), jnp.int32)
  shapes = jax.eval_shape(dm.init, jax.random.key(0), ids)["cache"]
  return {"model": _zeros_like(shapes), "index": jnp.array(0, jnp.int32),
          "valid": jnp.zeros((batch, length), bool), "count": jnp.zeros((batch,), jnp.int32)}


def gpt_step_fn(model: nn.Module, params, last_only: bool = False):
  """step(ids [B, T], cache, valid=None [B, T] bool) -> (logits [B, T, V] float32, cache).

  Slots with valid=False (left padding) are never attended to and do not advance the row's
  positions, so a row's real tokens get positions 0, 1, ... whatever its padding.
  last_only: logits [B, 1, V] of the last slot only (what `sample` reads; a prefill of T
  tokens then projects one row per sequence onto the vocabulary, not T).
  """
  dm = decode_model(model)

  def step(ids: Array, cache: dict, valid: Array | None = None):
    index, count = cache["index"], cache["count"]
    real = jnp.ones(ids.shape, bool) if valid is None else valid.astype(bool)    # [B, T]
    slots = jax.lax.dynamic_update_slice(cache["valid"], real, (0, index))     # [B, L]
    positions = jnp.maximum(count[:, None] + jnp.cumsum(real, axis=1) - 1, 0)  # [B, T]
    logits, mutated = dm.apply({"params": params, "cache": cache["model"]}, ids,
                               input_mask=slots, positions=positions, last_only=last_only,
                               mutable=["cache"])
    return logits, {"model": mutated["cache"], "index": index + ids.shape[1],
                    "valid": slots, "count": count + real.sum(axis=1, dtype=jnp.int32)}

  return step


@functools.partial(jax.jit, static_argnames=(
    "model", "max_new_tokens", "temperature", "top_k", "top_p", "eos_id", "pad_id"))
def gpt_generate(model: nn.Module, params, prompt: Array, prompt_lengths: Array, *,
                 max_new_tokens: int, rng: Array | None = None, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, eos_id: int | None = None,
                 pad_id: int = 0) -> Array:
  """Continuations [B, max_new_tokens] of right-padded prompts [B, P] (see sampling.sample).

  temperature=0 is greedy. One compile per (model, shapes, sampling settings).
  """
  batch, width = prompt.shape
  cache = gpt_init_cache(model, batch, width + max_new_tokens)
  return sample(gpt_step_fn(model, params, last_only=True), cache, prompt, prompt_lengths,
                max_new_tokens=max_new_tokens, rng=rng, temperature=temperature, top_k=top_k,
                top_p=top_p, eos_id=eos_id, pad_id=pad_id)


# ---------------------------------------------------------------- encoder-decoder
def seq2seq_init_cache(model: nn.Module, params, encoded: Array, src_mask: Array,
                       length: int) -> dict:
  """The decoder cache for `length` target steps, cross-attention K/V projected once.

  encoded [B, S, d] (from `Transformer.encode`), src_mask [B, S]. The encoder output lives
  in the cache (as each layer's cross K/V), not in the step function, so beam search can
  expand it with the rest of the cache.
  """
  dm = decode_model(model)
  if length > dm.config.max_len:  # the sinusoid table would clamp later positions silently
    raise ValueError(f"{length} target steps exceed the model's {dm.config.max_len} positions.")
  batch, src_len = src_mask.shape
  shapes = jax.eval_shape(dm.init, jax.random.key(0), jnp.ones((batch, src_len), jnp.int32),
                          jnp.zeros((batch, length), jnp.int32))["cache"]
  # One decoder call without a cache creates every cache variable, the cross K/V from
  # `encoded` (self-attention ones one slot long, discarded: they come from `shapes`).
  _, primed = dm.apply({"params": params}, encoded, src_mask,
                       jnp.zeros((batch, 1), jnp.int32), method="decode", mutable=["cache"])
  model_cache = jax.tree_util.tree_map_with_path(
      lambda path, s, p: p if is_cross(path) else jnp.zeros(s.shape, s.dtype),
      shapes, primed["cache"])
  return {"model": model_cache, "index": jnp.array(0, jnp.int32),
          "cross_mask": src_mask.astype(bool)}


def seq2seq_step_fn(model: nn.Module, params):
  """step(ids [B, T], cache) -> (logits [B, T, V] float32, cache); positions = slot index."""
  dm = decode_model(model)

  def step(ids: Array, cache: dict, valid: Array | None = None):
    if valid is not None:
      raise ValueError("seq2seq decoding starts from BOS; target prompts are not supported.")
    index = cache["index"]
    positions = jnp.broadcast_to(index + jnp.arange(ids.shape[1]), ids.shape)
    logits, mutated = dm.apply({"params": params, "cache": cache["model"]}, None,
                               cache["cross_mask"], ids, tgt_positions=positions,
                               method="decode", mutable=["cache"])
    return logits, {"model": mutated["cache"], "index": index + ids.shape[1],
                    "cross_mask": cache["cross_mask"]}

  return step


@functools.partial(jax.jit, static_argnames=(
    "model", "max_len", "bos_id", "eos_id", "method", "beam_size", "alpha", "extra_len",
    "pad_id"))
def seq2seq_generate(model: nn.Module, params, src_ids: Array, src_mask: Array, *,
                     max_len: int, bos_id: int, eos_id: int | None, method: str = "beam",
                     beam_size: int = 4, alpha: float = 0.6, extra_len: int | None = 50,
                     pad_id: int = 0) -> tuple[Array, Array | None]:
  """Translates a batch: src_ids/src_mask [B, S] -> (best sequences [B, max_len], scores).

  The encoder runs once. method "beam" (scores [B]: the best hypothesis' penalized
  log-prob) or "greedy" (scores None). Row b stops at min(max_len, source length +
  extra_len) tokens (extra_len=None: at max_len). Sequences exclude BOS, include EOS.
  """
  dm = decode_model(model)
  encoded = dm.apply({"params": params}, src_ids, src_mask, method="encode")  # [B, S, d]
  cache = seq2seq_init_cache(model, params, encoded, src_mask, max_len)
  step = seq2seq_step_fn(model, params)
  batch = src_ids.shape[0]
  bos = jnp.full((batch,), bos_id, jnp.int32)
  row_max_len = None
  if extra_len is not None:
    row_max_len = src_mask.astype(jnp.int32).sum(axis=1) + extra_len
  if method == "greedy":
    return greedy_search(step, cache, bos, max_len=max_len, eos_id=eos_id, pad_id=pad_id,
                         row_max_len=row_max_len), None
  if method != "beam":
    raise ValueError(f"method={method!r}; expected 'beam' or 'greedy'.")
  seqs, scores = beam_search(step, cache, bos, beam_size=beam_size, max_len=max_len,
                             eos_id=eos_id, alpha=alpha, row_max_len=row_max_len,
                             pad_id=pad_id)
  return seqs[:, 0], scores[:, 0]
