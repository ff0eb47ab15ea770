"""layers/dropout.py: 16-bit draws, two per random word, against the probabilities asked."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.layers.dropout import Dropout, dropout, keep_mask


@pytest.mark.parametrize("shape", [(64, 128, 256), (33, 17, 257), (4099,)])
def test_keep_rate_and_scale_match_the_asked_rate(shape):
  keep, scale = keep_mask(jax.random.key(0), shape, 0.1)
  assert keep.shape == shape and keep.dtype == jnp.bool_
  n = np.prod(shape)
  p = float(keep.mean())
  # Binomial(n, 0.9): 5 standard deviations.
  assert abs(p - 0.9) < 5 * np.sqrt(0.9 * 0.1 / n), p
  assert abs(1.0 / scale - 0.9) < 2.0 ** -17  # the exact keep probability used


def test_the_two_halves_of_a_word_are_independent_draws():
  # Element j and element j + d/2 of a row come from the low and high 16 bits of one word.
  keep, _ = keep_mask(jax.random.key(3), (2048, 512), 0.5)
  lo, hi = np.asarray(keep[:, :256]), np.asarray(keep[:, 256:])
  both = float((lo & hi).mean())
  assert abs(both - 0.25) < 5 * np.sqrt(0.25 * 0.75 / lo.size), both
  # ... and different keys give different masks.
  other, _ = keep_mask(jax.random.key(4), (2048, 512), 0.5)
  assert 0.45 < float((np.asarray(other) == np.asarray(keep)).mean()) < 0.55


def test_dropout_is_unbiased_and_zeroes_what_it_drops():
  x = jnp.full((512, 768), 3.0)
  y = np.asarray(dropout(jax.random.key(1), x, 0.1))
  kept = y != 0
  assert np.allclose(y[kept], 3.0 / (58982 / 65536))  # round(0.9 * 2^16) = 58982
  assert abs(y.mean() - 3.0) < 3.0 * 5 * np.sqrt(0.1 / 0.9 / y.size)
  assert dropout(jax.random.key(1), x, 0.0) is x
  with pytest.raises(ValueError, match="dropout rate 1.0"):
    keep_mask(jax.random.key(0), (4,), 1.0)


def test_module_is_identity_when_deterministic_and_draws_from_the_dropout_stream():
  x = jnp.ones((8, 16), jnp.bfloat16)
  assert Dropout(0.1, deterministic=True).apply({}, x) is x
  a = Dropout(0.5, deterministic=False).apply({}, x, rngs={"dropout": jax.random.key(0)})
  b = Dropout(0.5).apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(0)})
  c = Dropout(0.5, deterministic=False).apply({}, x, rngs={"dropout": jax.random.key(1)})
  assert a.dtype == jnp.bfloat16 and set(np.unique(np.asarray(a, np.float32))) <= {0.0, 2.0}
  assert (np.asarray(a) == np.asarray(b)).all() and not (np.asarray(a) == np.asarray(c)).all()


def test_element_2i_is_word_i_low_half_and_2i_plus_1_its_high_half():
  # The mask's definition (layers/dropout.py), from the words themselves: an odd last
  # axis drops the last word's high half.
  key, shape, rate = jax.random.key(5), (6, 7, 9), 0.3
  keep, _ = keep_mask(key, shape, rate)
  words = np.asarray(jax.random.bits(key, (6, 7, 5), jnp.uint32))
  threshold = int(round((1 - rate) * 65536))
  want = np.stack([(words & 0xFFFF) < threshold, (words >> 16) < threshold], -1)
  np.testing.assert_array_equal(np.asarray(keep), want.reshape(6, 7, 10)[..., :9])
  # A rate under 2^-17 keeps everything (a threshold of 2^16 compared without overflow).
  assert bool(keep_mask(key, (4, 6), 1e-6)[0].all())
