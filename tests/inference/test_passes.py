"""Packing texts into passes: every text placed once, rows within their length, few
positions computed empty, and pass shapes from a small fixed set."""
import numpy as np

from bert_jax.inference import passes


def test_pack_first_fit_decreasing_fills_rows_within_their_length():
  lengths = [100, 60, 50, 40, 30, 20, 128, 10, 5]
  row_of = passes.pack(lengths, 128)
  sums = np.bincount(row_of, weights=lengths)
  assert sums.max() <= 128 and row_of[6] == 0     # the longest opens the first row
  # 443 tokens need 4 rows of 128; first-fit decreasing finds a 4-row packing here.
  assert row_of.max() + 1 == 4
  # Into rows already open (their free tokens, updated): no new row, -1 where none fits.
  free = np.array([3, 10])
  assert passes.pack([5, 4, 2, 20], 96, free).tolist() == [1, 1, 0, -1]
  assert free.tolist() == [1, 1]

  def plans(lengths, batch_size):
    return [(p.texts.tolist(), p.row_of.tolist(), p.row_length, p.rows, p.passes)
            for p in passes.plan_passes(lengths, batch_size)]
  # Longer than 96 tokens (100, 128): rows as long as the longest, bucketed (128), one a
  # pass at batch_size 3 (3 * 64 tokens a pass); the short texts fill what they leave,
  # longest first: 20 and 5 go into the 100's row. The other short ones share rows of 96
  # (60+30, 50+40, 10), the rows spread over passes of about batch_size * 64 tokens:
  # 3 passes of 1 row rather than 2 of 2 (4 rows, one of them empty).
  expected = [([1, 2, 3, 4, 7], [0, 1, 1, 0, 2], 96, 1, 3),
              ([6, 0, 5, 8], [0, 1, 1, 1], 128, 1, 2)]
  assert plans(lengths, batch_size=3) == plans(lengths, batch_size=1) == expected
  assert plans([200, 3, 3], batch_size=64) == [([0, 1, 2], [0, 0, 0], 224, 1, 1)]
  # Rows a pass come from a fixed set (1, 2, 4, multiples of 8): inputs of other sizes
  # reuse a compiled shape. 300 or 310 texts of 20 tokens: 75 or 78 rows of 96, 2 passes.
  a, b = passes.plan_passes([20] * 300, 64)[0], passes.plan_passes([20] * 310, 64)[0]
  assert (a.row_length, a.rows, a.passes) == (b.row_length, b.rows, b.passes) == (96, 40, 2)
  assert [passes.rows_a_pass(n) for n in (1, 3, 4, 5, 8, 9, 41)] == [1, 4, 4, 8, 8, 16, 48]
  # The passes count whose rounding computes the fewest empty rows: 168 rows at 42 a
  # pass run as 3 passes of 56 (4 of 48 would compute 24 empty rows), but not as one
  # pass over 1.5x the target; ties keep the target's count.
  assert passes._pass_shape(168, 42) == (56, 3)
  assert passes._pass_shape(75, 42) == (40, 2)
  assert passes._pass_shape(9, 4) == (2, 5)      # 3 passes of 4 would compute 3 empty rows


def test_plans_place_every_text_once_and_leave_few_positions_empty():
  # A sentence-like mix (mean ~33 tokens, a tail past 96), as the corpus lines of
  # bench/inference/embed.py.
  rng = np.random.default_rng(0)
  lengths = np.clip(np.round(rng.lognormal(3.35, 0.5, size=500)), 4, 200).astype(int)
  assert 1 <= (lengths > 96).sum() <= 20
  plans = passes.plan_passes(lengths, 64)
  assert len(plans) == 2                                    # two shapes, two compiles
  placed = np.concatenate([p.texts for p in plans])
  np.testing.assert_array_equal(np.sort(placed), np.arange(len(lengths)))
  for p in plans:
    assert p.row_of.max() < p.rows * p.passes
    assert np.bincount(p.row_of, weights=lengths[p.texts]).max() <= p.row_length
    assert len(set((p.row_of // p.rows).tolist())) == p.passes   # no empty pass
  computed = sum(p.row_length * p.rows * p.passes for p in plans)
  # Every row but the last few of a pass is full to within a short text: the plan
  # computes at most 7% more positions than there are tokens (one text a row padded to
  # the longest would compute over 6x).
  assert lengths.sum() / computed >= 0.93, lengths.sum() / computed
