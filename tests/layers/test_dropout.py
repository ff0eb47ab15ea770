"""layers/dropout.py: the keep rate asked, the scale that keeps E[x], the rng stream."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.layers.dropout import Dropout, dropout


@pytest.mark.parametrize("shape", [(64, 128, 256), (33, 17, 257), (4099,)])
def test_keep_rate_and_scale_match_the_asked_rate(shape):
  x = jnp.ones(shape, jnp.float32)
  y = np.asarray(dropout(jax.random.key(0), x, 0.1))
  kept = y != 0
  n = np.prod(shape)
  # Binomial(n, 0.9): 5 standard deviations.
  assert abs(kept.mean() - 0.9) < 5 * np.sqrt(0.9 * 0.1 / n), kept.mean()
  np.testing.assert_allclose(y[kept], 1.0 / 0.9, rtol=1e-6)   # kept values scaled by 1/keep


def test_mean_is_kept_and_keys_differ():
  x = jax.random.normal(jax.random.key(1), (512, 512)) + 3.0
  a = dropout(jax.random.key(2), x, 0.5)
  b = dropout(jax.random.key(3), x, 0.5)
  assert abs(float(a.mean()) - float(x.mean())) < 0.05
  assert 0.45 < float(((a == 0) == (b == 0)).mean()) < 0.55   # independent masks


def test_bfloat16_stays_bfloat16_and_rate_is_checked():
  x = jnp.ones((8, 16), jnp.bfloat16)
  assert dropout(jax.random.key(0), x, 0.25).dtype == jnp.bfloat16
  assert dropout(jax.random.key(0), x, 0.0) is x
  with pytest.raises(ValueError, match="dropout rate 1.0"):
    dropout(jax.random.key(0), x, 1.0)


def test_module_uses_the_dropout_stream_and_deterministic_is_identity():
  x = jnp.ones((4, 32))
  layer = Dropout(0.5)
  assert layer.apply({}, x, deterministic=True) is x
  y1 = layer.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(7)})
  y2 = layer.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(7)})
  np.testing.assert_array_equal(y1, y2)
  with pytest.raises(Exception, match="dropout"):
    layer.apply({}, x, deterministic=False)
