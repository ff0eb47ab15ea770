import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.layers import positional


def test_sinusoidal_matches_vaswani_formula_elementwise():
  max_len, d = 50, 16
  table = positional.sinusoidal_table(max_len, d)
  for pos in range(max_len):
    for i in range(d // 2):
      angle = pos / 10000 ** (2 * i / d)
      assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
      assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoidal_odd_width_and_module_lookup():
  table = positional.sinusoidal_table(10, 7)
  assert table.shape == (10, 7)
  assert table[3, 6] == pytest.approx(math.sin(3 / 10000 ** (6 / 7)), abs=1e-6)
  module = positional.SinusoidalPositionalEncoding(10, 7)
  out = module.apply({}, jnp.array([[3, 0]]))
  np.testing.assert_allclose(out[0], table[[3, 0]], atol=1e-7)


def test_rotary_scores_depend_only_on_relative_position():
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32)

  def score(m, n):
    qm = positional.apply_rotary(q, jnp.array([[m]]))
    kn = positional.apply_rotary(k, jnp.array([[n]]))
    return float(jnp.sum(qm * kn))

  assert score(3, 1) == pytest.approx(score(10, 8), abs=1e-5)
  assert score(0, 0) == pytest.approx(float(jnp.sum(q * k)), abs=1e-5)  # position 0 = identity
  assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)
  # A rotation keeps norms.
  rotated = positional.apply_rotary(q, jnp.array([[7]]))
  assert float(jnp.linalg.norm(rotated)) == pytest.approx(float(jnp.linalg.norm(q)), rel=1e-6)


def test_t5_relative_buckets_known_values():
  rel = jnp.array([0, -1, 1, -7, 7, -8, -20, -127, -128, -1000])
  b = np.asarray(positional.relative_position_bucket(rel, True, 32, 128))
  # Exact region: |d| < 8; keys after the query use the upper half (16..31).
  assert list(b[:5]) == [0, 1, 17, 7, 23]
  # Log region: 8 + floor(log(|d|/8) / log(128/8) * 8), capped at 15.
  expect = [8 + int(math.log(d / 8) / math.log(16) * 8) for d in (8, 20, 127)]
  assert list(b[5:8]) == expect
  assert b[8] == 15 and b[9] == 15
  causal = np.asarray(positional.relative_position_bucket(jnp.array([1, 0, -3]), False, 32, 128))
  assert list(causal) == [0, 0, 3]  # future keys collapse to bucket 0 for a causal model
