"""NSP instances, packed rows and dynamic masking, checked by their statistics."""
import numpy as np
import pytest
from scipy import stats

from bert_jax.data import instances as inst

CLS, SEP, PAD, MASK, UNK = 2, 3, 0, 4, 1
SPECIAL = [PAD, UNK, CLS, SEP, MASK]
FIRST = 1000  # synthetic token ids start here: id - FIRST is the corpus position


def synthetic_corpus(num_docs, seed=0, sentences=(1, 30), lengths=(3, 40)):
  """Documents whose token ids are their global positions (+FIRST): each id is unique."""
  rng = np.random.default_rng(seed)
  docs, doc_of, pos = [], [], FIRST
  for d in range(num_docs):
    doc = []
    for _ in range(rng.integers(*sentences)):
      n = int(rng.integers(*lengths))
      doc.append(np.arange(pos, pos + n, dtype=np.int32))
      pos += n
    docs.append(doc)
    doc_of += [d] * sum(len(s) for s in doc)
  return docs, np.array(doc_of)


@pytest.fixture(scope="module")
def nsp():
  docs, doc_of = synthetic_corpus(600)
  rng = np.random.default_rng(1)
  sampler = inst.CumulativeSampler(np.ones(len(docs)))
  instances = []
  for dupe in range(2):
    for i in range(len(docs)):
      instances += inst.create_nsp_instances(docs, i, 128, 0.1, CLS, SEP, rng, sampler)
  return docs, doc_of, instances


def split_ab(instance):
  ids = instance.input_ids
  first_sep = int(np.flatnonzero(ids == SEP)[0])
  return ids[1:first_sep], ids[first_sep + 1:-1], first_sep


def test_nsp_layout(nsp):
  _, _, instances = nsp
  for x in instances:
    a, b, first_sep = split_ab(x)
    assert x.input_ids[0] == CLS and x.input_ids[-1] == SEP
    assert len(x.input_ids) <= 128 and len(a) >= 1 and len(b) >= 1
    np.testing.assert_array_equal(x.segment_ids, np.arange(len(x.input_ids)) > first_sep)
  lengths = np.array([len(x.input_ids) for x in instances])
  assert (lengths == 128).mean() > 0.5  # most fill the sequence
  assert (lengths < 40).mean() > 0.02  # short_seq_prob makes some short


def test_nsp_label_balance_and_real_continuations(nsp):
  docs, doc_of, instances = nsp
  assert sum(len(s) for d in docs for s in d) >= 100_000
  labels = np.array([x.is_random_next for x in instances])
  assert len(labels) > 5000
  assert abs(labels.mean() - 0.5) < 0.02
  for x in instances:
    a, b, _ = split_ab(x)
    # Ids are corpus positions: A and B are contiguous runs of the source.
    assert (np.diff(a) == 1).all() and (np.diff(b) == 1).all()
    a_doc, b_doc = doc_of[a[0] - FIRST], doc_of[b[0] - FIRST]
    assert doc_of[a[-1] - FIRST] == a_doc and doc_of[b[-1] - FIRST] == b_doc
    if x.is_random_next:
      assert b_doc != a_doc
    else:  # B continues A in the same document; only truncated tokens lie between.
      assert b_doc == a_doc
      assert 0 <= b[0] - a[-1] - 1 <= 128


def test_nsp_single_documents_and_determinism():
  docs, _ = synthetic_corpus(1, sentences=(3, 4))
  out = inst.create_nsp_instances(docs, 0, 32, 0.0, CLS, SEP, np.random.default_rng(0))
  assert out  # a pool of one draws the random B from itself, never crashes
  docs, _ = synthetic_corpus(50)
  run = lambda: [x.input_ids.tolist() for x in inst.create_nsp_instances(
      docs, 3, 64, 0.1, CLS, SEP, np.random.default_rng(5))]
  assert run() == run()


@pytest.mark.parametrize("across", [True, False])
def test_packed_rows_keep_every_token_in_order(across):
  docs, doc_of = synthetic_corpus(200, lengths=(3, 200))  # some sentences overflow a row
  rows = inst.create_packed_rows(docs, 128, CLS, SEP, across_documents=across)
  tokens = []
  for row in rows:
    ids, seg = row.input_ids, row.segment_ids
    assert len(ids) <= 128 and ids[0] == CLS and ids[-1] == SEP and seg[0] == 1
    # Segments number the row's document fragments 1, 2, ...; each ends with [SEP].
    sep_at = np.flatnonzero(ids == SEP)
    np.testing.assert_array_equal(seg[sep_at], np.arange(1, len(sep_at) + 1))
    expected = np.concatenate([[1], 1 + np.cumsum(ids[:-1] == SEP)])
    np.testing.assert_array_equal(seg, expected)
    body = ids[(ids != CLS) & (ids != SEP)]
    # A fragment holds one document only.
    for s in range(1, seg.max() + 1):
      frag = ids[(seg == s) & (ids >= FIRST)]
      assert len(set(doc_of[frag - FIRST])) == 1
    if not across:
      assert seg.max() == 1
    tokens.append(body)
  np.testing.assert_array_equal(np.concatenate(tokens), np.arange(FIRST, FIRST + len(doc_of)))
  docs, _ = synthetic_corpus(100, lengths=(3, 40))
  rows = inst.create_packed_rows(docs, 128, CLS, SEP, across_documents=across)
  fill = np.mean([len(r.input_ids) for r in rows]) / 128
  assert fill > (0.85 if across else 0.6)  # FULL-SENTENCES wastes only row ends


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
  return inst.Masker(**args), counts


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
