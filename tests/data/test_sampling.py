"""The cumulative sampler draws its target distribution; the stateless bits are sound."""
import numpy as np
import pytest
from scipy import stats

from bert_jax.data import sampling


def test_draws_match_the_target_distribution_chi_square():
  weights = np.array([50.0, 0.0, 10.0, 25.0, 5.0, 0.0, 100.0, 1.0])
  sampler = sampling.CumulativeSampler(weights, power=0.75, exclude_ids=[3])
  draws = sampler.sample(np.random.default_rng(0), (200_000,))
  target = weights**0.75
  target[[1, 3, 5]] = 0.0  # zero weights and the excluded id
  counts = np.bincount(draws, minlength=len(weights))
  assert counts[[1, 3, 5]].sum() == 0
  keep = target > 0
  expected = target[keep] / target.sum() * len(draws)
  assert stats.chisquare(counts[keep], expected).pvalue > 1e-3
  np.testing.assert_allclose(sampler.probs, target / target.sum())


def test_per_draw_exclusion_redraws():
  sampler = sampling.CumulativeSampler(np.ones(4))
  exclude = np.arange(4)[:, None]  # row r must never draw r
  draws = sampler.sample(np.random.default_rng(1), (4, 5000), exclude=exclude)
  assert not (draws == exclude).any()
  # The other three ids stay uniform: 5000 / 3 each per row.
  counts = np.stack([np.bincount(r, minlength=4) for r in draws])
  np.testing.assert_allclose(counts[~np.eye(4, dtype=bool)], 5000 / 3, rtol=0.08)


def test_scalar_draw_with_exclusion():
  # Regression: a shape=() draw that hit its excluded id crashed on item assignment.
  sampler = sampling.CumulativeSampler([1.0, 1.0])
  rng = np.random.default_rng(0)
  assert {int(sampler.sample(rng, exclude=0)) for _ in range(50)} == {1}


def test_zero_weight_tail_is_never_returned():
  # Regression: cumsum of ten 0.1s is 0.9999999999999999, so u in that last gap
  # returned the zero-weight id after the last drawable one.
  sampler = sampling.CumulativeSampler([0.1] * 10 + [0.0])
  gap = np.array([np.cumsum(np.full(10, 0.1))[-1], 1.0 - 2**-53])  # both in [0.99..99, 1)
  assert gap[0] < 1.0
  np.testing.assert_array_equal(sampler.from_uniform(gap), [9, 9])


def test_from_uniform_is_the_inverse_cdf():
  sampler = sampling.CumulativeSampler([1.0, 0.0, 3.0])  # cdf 0.25, 0.25, 1
  np.testing.assert_array_equal(
      sampler.from_uniform(np.array([0.0, 0.2499, 0.25, 0.9999])), [0, 0, 2, 2])


def test_bad_weights_raise():
  with pytest.raises(ValueError, match="sum to zero"):
    sampling.CumulativeSampler([1.0, 2.0], exclude_ids=[0, 1])
  with pytest.raises(ValueError, match="non-negative"):
    sampling.CumulativeSampler([1.0, -1.0])


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1000, 4097])
def test_permute_is_a_bijection(n):
  out = sampling.permute(np.arange(n), n, key=np.uint64(12345))
  np.testing.assert_array_equal(np.sort(out), np.arange(n))
  # Each index alone (the scalar cycle-walk path) lands where the vectorized path put it.
  alone = [int(sampling.permute(np.array([i]), n, np.uint64(12345))[0]) for i in range(0, n, 7)]
  np.testing.assert_array_equal(alone, out[::7])


def test_permute_depends_on_the_key_and_shuffles_well():
  n = 10_000
  a = sampling.permute(np.arange(n), n, key=np.uint64(1))
  b = sampling.permute(np.arange(n), n, key=np.uint64(2))
  assert (a == b).mean() < 0.01  # different epochs: different orders
  # A shuffled order: position and value uncorrelated, few fixed points.
  assert abs(np.corrcoef(np.arange(n), a)[0, 1]) < 0.05
  assert (a == np.arange(n)).sum() < 10
  # Per-element keys: elements with the same key see the same permutation.
  keys = np.where(np.arange(n) < n // 2, 1, 2).astype(np.uint64)
  mixed = sampling.permute(np.arange(n), n, key=keys)
  np.testing.assert_array_equal(mixed[:n // 2], a[:n // 2])
  np.testing.assert_array_equal(mixed[n // 2:], b[n // 2:])


def test_uniforms_are_uniform_and_reproducible():
  keys = sampling.example_keys(7, epoch=0, index=np.arange(1000))
  u = sampling.uniforms(keys, stream=0, n=200)  # [1000, 200]
  assert u.min() >= 0.0 and u.max() < 1.0
  counts = np.histogram(u, bins=20, range=(0, 1))[0]
  assert stats.chisquare(counts).pvalue > 1e-3
  assert abs(np.corrcoef(u[:, :-1].ravel(), u[:, 1:].ravel())[0, 1]) < 0.01
  # Pure functions of (seed, epoch, index, stream): same inputs, same bits.
  again = sampling.uniforms(sampling.example_keys(7, 0, np.arange(1000)), 0, 200)
  np.testing.assert_array_equal(u, again)
  other = [sampling.uniforms(sampling.example_keys(*a), 0, 200)
           for a in ((8, 0, np.arange(1000)), (7, 1, np.arange(1000)))]
  other.append(sampling.uniforms(keys, 1, 200))
  for v in other:
    assert abs(np.corrcoef(u.ravel(), v.ravel())[0, 1]) < 0.01
