"""Dynamic MLM masking (data/masking.py), checked by its statistics."""
import numpy as np
import pytest
from scipy import stats

from bert_jax.data import masking

CLS, SEP, PAD, MASK, UNK = 2, 3, 0, 4, 1
SPECIAL = [PAD, UNK, CLS, SEP, MASK]


def random_batch(batch=1600, length=128, vocab=5000, seed=0):
  """[B, L] [CLS] tokens [SEP] rows of random length, padded with [PAD]."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(10, length + 1, batch)
  ids = rng.integers(10, vocab, (batch, length)).astype(np.int32)
  ids[np.arange(length) >= lengths[:, None]] = PAD
  ids[:, 0] = CLS
  ids[np.arange(batch), lengths - 1] = SEP
  return ids, lengths


def make_masker(vocab=5000, **kw):
  counts = np.random.default_rng(3).integers(1, 100, vocab)
  counts[SPECIAL] = 10_000  # high counts must not make specials drawable
  args = dict(special_ids=SPECIAL, vocab_size=vocab, mask_id=MASK, max_predictions=20,
              replacement_weights=counts, seed=11)
  args.update(kw)
  return masking.Masker(**args), counts


def test_masking_statistics():
  ids, lengths = random_batch()
  masker, counts = make_masker()
  out = masker(ids, epoch=0, index=np.arange(len(ids)))
  pos, mids, w = out["masked_lm_positions"], out["masked_lm_ids"], out["masked_lm_weights"]
  real = lengths - 2
  assert real.sum() >= 100_000
  chosen = w.sum(axis=1)
  np.testing.assert_array_equal(chosen, np.minimum(20, np.maximum(1, np.rint(real * 0.15))))
  assert abs(chosen.sum() / real.sum() - 0.15) < 0.005
  sel = w > 0
  rows = np.nonzero(sel)[0]
  at = pos[sel]
  # Never a special or padding position; positions ascending, padding 0 with weight 0.
  assert (at >= 1).all() and (at < lengths[rows] - 1).all()
  assert (np.diff(np.where(sel, pos, 10**6 + np.arange(20)), axis=1) > 0).all()
  assert (pos[~sel] == 0).all() and (mids[~sel] == 0).all()
  np.testing.assert_array_equal(mids[sel], ids[rows, at])  # labels are the originals
  new = out["input_ids"][rows, at]
  is_mask, same = new == MASK, new == ids[rows, at]
  is_random = ~is_mask & ~same
  assert abs(is_mask.mean() - 0.8) < 0.01
  assert abs(same.mean() - 0.1) < 0.01  # (random draws equal the original ~0.002%)
  assert abs(is_random.mean() - 0.1) < 0.01
  untouched = np.ones(ids.shape, bool)
  untouched[rows, at] = False
  np.testing.assert_array_equal(out["input_ids"][untouched], ids[untouched])
  assert out["input_ids"].dtype == np.int32 and pos.dtype == np.int32
  assert mids.dtype == np.int32 and w.dtype == np.float32


def test_random_replacements_follow_unigram_counts_never_special():
  masker, counts = make_masker(vocab=50)
  draws = masker.sampler.from_uniform(np.random.default_rng(0).random(200_000))
  assert not np.isin(draws, SPECIAL).any()
  target = counts.astype(float)
  target[SPECIAL] = 0
  keep = target > 0
  observed = np.bincount(draws, minlength=50)[keep]
  assert stats.chisquare(observed, target[keep] / target.sum() * len(draws)).pvalue > 1e-3
  uniform, _ = make_masker(vocab=50, replacement_weights=None)
  np.testing.assert_allclose(uniform.sampler.probs[keep], 1 / 45)


def test_masks_depend_on_seed_epoch_and_index_only():
  ids, _ = random_batch(64)
  masker, _ = make_masker()
  a = masker(ids, 0, np.arange(64))
  perm = np.random.default_rng(0).permutation(64)
  b = masker(ids[perm], 0, perm)  # same examples, other rows of another batch
  for key in ("input_ids", "masked_lm_positions", "masked_lm_weights"):
    np.testing.assert_array_equal(a[key][perm], b[key])
  c = masker(ids, 1, np.arange(64))  # next epoch: a fresh mask
  assert (a["masked_lm_positions"] != c["masked_lm_positions"]).any(axis=1).mean() > 0.9


def test_whole_word_masking_keeps_words_together():
  vocab = 5000
  continuation = np.zeros(vocab, bool)
  continuation[3000:] = True  # ids >= 3000 are "##" pieces
  ids, lengths = random_batch(500, vocab=vocab)
  masker, _ = make_masker(vocab=vocab, whole_word_mask=True, continuation=continuation)
  out = masker(ids, 0, np.arange(500))
  w = out["masked_lm_weights"] > 0
  k = np.minimum(20, np.maximum(1, np.rint((lengths - 2) * 0.15)))
  assert (w.sum(1) <= k).all() and w.sum() > 0.9 * k.sum()
  chosen = np.zeros(ids.shape, bool)
  rows = np.nonzero(w)[0]
  chosen[rows, out["masked_lm_positions"][w]] = True
  real = ~np.isin(ids, SPECIAL)
  inside = real[:, 1:] & continuation[ids[:, 1:]] & real[:, :-1]  # piece j+1 joins word of j
  # A word is all in or all out: no chosen/unchosen pair across a continuation link.
  assert (chosen[:, 1:][inside] == chosen[:, :-1][inside]).all()
  assert chosen[:, 1:][inside].sum() > 100  # multi-piece words were masked
  assert not chosen[~real].any()


def test_max_predictions_larger_than_sequence():
  ids, _ = random_batch(8, length=16)
  masker, _ = make_masker(max_predictions=40, masked_lm_prob=0.9)
  out = masker(ids, 0, np.arange(8))
  assert out["masked_lm_positions"].shape == (8, 40)
  assert (out["masked_lm_weights"].sum(1) <= 14).all()


def test_the_mask_random_keep_split_follows_the_config():
  """0.5 / 0.3 / 0.2 of ~16k masked slots, each share within 4 sigma of its binomial."""
  ids, lengths = random_batch()
  masker, _ = make_masker(mask_token_prob=0.5, random_token_prob=0.3)
  out = masker(ids, epoch=0, index=np.arange(len(ids)))
  sel = out["masked_lm_weights"] > 0
  rows = np.nonzero(sel)[0]
  orig = ids[rows, out["masked_lm_positions"][sel]]
  new = out["input_ids"][rows, out["masked_lm_positions"][sel]]
  n = len(new)
  assert n > 15_000
  # (a random draw equals the original with probability ~1/5000: within the keep share)
  shares = {"mask": (new == MASK).mean(), "keep": (new == orig).mean(),
            "random": ((new != MASK) & (new != orig)).mean()}
  for name, p in {"mask": 0.5, "random": 0.3, "keep": 0.2}.items():
    assert abs(shares[name] - p) < 4 * np.sqrt(p * (1 - p) / n), (name, shares)


def test_the_default_split_gives_the_masks_of_the_fixed_80_10_10():
  """The defaults reproduce the hard-coded rule they replace: r < 0.8 [MASK], r >= 0.9 a
  random token, from the same uniforms (sampling.uniforms streams 1 and 2)."""
  from bert_jax.data.sampling import example_keys, uniforms  # pylint: disable=g-import-not-at-top
  ids, _ = random_batch(200)
  masker, _ = make_masker()
  index = np.arange(len(ids))
  out = masker(ids, epoch=3, index=index)
  pos, w = out["masked_lm_positions"], out["masked_lm_weights"] > 0
  keys = example_keys(masker.seed, 3, index)
  r = uniforms(keys, 1, masker.max_predictions)
  orig = np.take_along_axis(ids, pos, axis=1)
  expected = np.where(r < 0.8, MASK, orig)
  replace = w & (r >= 0.9)
  expected[replace] = masker.sampler.from_uniform(
      uniforms(keys, 2, masker.max_predictions)[replace])
  got = np.take_along_axis(out["input_ids"], pos, axis=1)
  np.testing.assert_array_equal(got[w], expected[w])
  assert replace.sum() > 50 and (got[w] == MASK).sum() > 500


@pytest.mark.parametrize("mask,rand,message", [
    (1.2, 0.0, r"^data.mask_token_prob=1.2 must be in \[0, 1\]"),
    (0.8, -0.1, r"^data.random_token_prob=-0.1 must be in \[0, 1\]"),
    (0.8, 0.3, r"^data.mask_token_prob=0.8 \+ data.random_token_prob=0.3 must be <= 1"),
])
def test_a_bad_split_is_one_line_naming_the_field(mask, rand, message):
  import ml_collections  # pylint: disable=g-import-not-at-top
  cfg = ml_collections.ConfigDict(dict(mask_token_prob=mask, random_token_prob=rand))
  with pytest.raises(ValueError, match=message) as e:
    masking.check_rates(cfg)
  assert "\n" not in str(e.value)
  masking.check_rates(ml_collections.ConfigDict(dict(mask_token_prob=0.5,
                                                     random_token_prob=0.5)))
