"""Attention-dropout keep bits from a counter-based hash of (seed, row, head, query, key).

Why a hash rather than jax.random's stream: a fused kernel (kernels/flash_dropout.py) sees
the [batch, heads, q_len, kv_len] probabilities one block at a time, forward and backward,
and must drop the same ones each time without the mask ever sitting in HBM. A bit that
is a pure function of the element's global coordinates gives exactly that: each block
recomputes its bits from its offsets, so the mask is the same for any block sizes, in the
forward and in both backward kernels, and on any sharding of rows and heads over devices
(the kernel is given its block's global row and head). `keep_mask` is the same function
over the whole array, in plain jnp: the view the tests compare the kernel against.

The arithmetic is uint32's (wrapping multiply and add, xor, logical right shift), carried
in int32: the bits are identical, and int32 is what the TPU's scalar and vector units
(and Mosaic's lowering) handle natively, with no unsigned compare needed at the end.

The hash: a per-(seed, row, head) stream word from three chained rounds; a per-query word
mix(stream ^ mix(q + salt)) and a per-key word mix(k + _KEY_SALT) (one per block row /
column, cheap);
per element one more round of their xor. Each round is Wellons' "lowbias32" finalizer
(hash-prospector; a murmur3-fmix-style xorshift-multiply, with a lower avalanche bias).
An element is kept when its top 31 bits are at least rate * 2^31: probability 1 - rate to
within 2^-31. tests/kernels/test_flash_dropout.py checks the kept fraction and that
neighbouring rows and columns are uncorrelated.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Array = jax.Array


def _word(c: int) -> np.int32:
  """A uint32 constant as the int32 with the same bits."""
  return np.array(c, np.uint32).view(np.int32)[()]


_MUL_1 = _word(0x7FEB352D)      # lowbias32's multipliers
_MUL_2 = _word(0x846CA68B)
_SEED_SALT = _word(0x9E3779B9)  # 2^32 / golden ratio: the seed word is never the raw seed
_KEY_SALT = _word(0x632BE5AB)   # keeps key k's word apart from query k's
_QUERY_SALT = _word(0x2545F491)
_16, _15 = np.int32(16), np.int32(15)


def mix(x: Array) -> Array:
  """One lowbias32 round on int32 words (a bijection of the 32 bits)."""
  x = x ^ lax.shift_right_logical(x, _16)
  x = x * _MUL_1
  x = x ^ lax.shift_right_logical(x, _15)
  x = x * _MUL_2
  return x ^ lax.shift_right_logical(x, _16)


def seed_from_key(key: Array) -> Array:
  """An int32 seed word from a jax PRNG key (the dropout rng a layer passes): a fresh
  draw for every key, so each layer and step (fold_in) drops differently."""
  return lax.bitcast_convert_type(jax.random.bits(key, (), jnp.uint32), jnp.int32)


def stream_word(seed: Array, row: Array, head: Array) -> Array:
  """The word of one (row, head) attention matrix: int32 arrays, broadcast together."""
  return mix(mix(mix(seed ^ _SEED_SALT) + row) + head)


def query_word(stream: Array, q_pos: Array) -> Array:
  """Per query position (global, 0-based), given its matrix's stream word. The position
  is mixed before it meets the stream: with stream + q, two matrices whose words differ
  by less than the length would share rows, shifted."""
  return mix(stream ^ mix(q_pos + _QUERY_SALT))


def key_word(kv_pos: Array) -> Array:
  """Per key position (global, 0-based); the same for every matrix."""
  return mix(kv_pos + _KEY_SALT)


def threshold(rate: float) -> np.int32:
  """The smallest kept value of an element's top 31 bits."""
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
  return np.int32(min(round(rate * 2.0 ** 31), 2 ** 31 - 1))


def keep(q_words: Array, k_words: Array, rate: float) -> Array:
  """Keep bits (True: kept) of the elements where q_words and k_words broadcast."""
  bits = mix(q_words ^ k_words)
  return lax.shift_right_logical(bits, np.int32(1)) >= threshold(rate)


def keep_mask(seed: Array, batch: int, heads: int, q_len: int, kv_len: int,
              rate: float) -> Array:
  """The whole [batch, heads, q_len, kv_len] bool mask (True: kept), in plain jnp: what
  the fused kernel drops, block by block. seed: int32 (or uint32) scalar."""
  seed = jnp.asarray(seed)
  seed = (lax.bitcast_convert_type(seed, jnp.int32) if seed.dtype == jnp.uint32
          else seed.astype(jnp.int32))
  rows = jnp.arange(batch, dtype=jnp.int32)[:, None]
  stream = stream_word(seed, rows, jnp.arange(heads, dtype=jnp.int32)[None, :])  # [b, h]
  q_words = query_word(stream[:, :, None], jnp.arange(q_len, dtype=jnp.int32))  # [b, h, q]
  k_words = key_word(jnp.arange(kv_len, dtype=jnp.int32))                       # [kv]
  return keep(q_words[..., None], k_words, rate)                    # [b, h, q, kv]
