"""word2vec host pipeline: vocab, subsampling, dynamic windows, negatives, batches."""
import numpy as np
import pytest
from scipy import stats

from bert_jax.word2vec import data as w2v
from bert_jax.data.sampling import CumulativeSampler


def distinct_corpus(lengths):
  """Sentences of the given lengths whose every token is its own id (id == position)."""
  n = sum(lengths)
  sent = np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)
  return w2v.EncodedCorpus(np.arange(n, dtype=np.int32), sent, np.array(lengths))


def test_vocab_like_gensim():
  from gensim.models import Word2Vec
  sentences = [["b", "a", "c", "a", "d"], ["c", "b", "e", "a", "f", "f"], ["g", "g", "g", "x"]]
  vocab = w2v.build_vocab(sentences, min_count=2)
  model = Word2Vec(min_count=2, sample=0.2, vector_size=4)
  model.build_vocab(sentences)
  # Count descending, ties in gensim's order (later-seen first).
  assert list(vocab.words) == list(model.wv.index_to_key) == ["g", "a", "f", "c", "b"]
  np.testing.assert_array_equal(vocab.counts, [3, 3, 2, 2, 2])
  # Subsampling probabilities: gensim stores keep * (2**32 - 1) as sample_int.
  keep = w2v.keep_probabilities(vocab.counts, 0.2)
  ref = [model.wv.get_vecattr(w, "sample_int") / (2**32 - 1) for w in vocab.words]
  np.testing.assert_allclose(keep, ref, rtol=1e-8)
  # By hand for "g": threshold 0.2 * 12 = 2.4, (sqrt(3/2.4) + 1) * 2.4/3 = 1.69 -> capped 1.
  assert keep[0] == 1.0
  np.testing.assert_allclose(w2v.keep_probabilities(np.array([1000, 10]), 1e-3),
                             [(np.sqrt(1000 / 1.01) + 1) * 1.01 / 1000,    # 0.0328
                              (np.sqrt(10 / 1.01) + 1) * 1.01 / 10])        # 0.4188


def test_empty_corpus_and_empty_vocab_errors(tmp_path):
  with pytest.raises(ValueError, match="corpus is empty"):
    w2v.build_vocab([[], []], min_count=1)
  with pytest.raises(ValueError, match=r"vocabulary is empty.*min_count=5.*3 times"):
    w2v.build_vocab([["a", "b", "a", "a"]], min_count=5)
  empty = tmp_path / "empty.txt"
  empty.write_text("\n  \n1 2 3\n")  # simple_preprocess keeps no digit-only tokens
  with pytest.raises(ValueError, match="corpus is empty"):
    w2v.build_vocab(w2v.load_corpus("text", str(empty)))
  with pytest.raises(FileNotFoundError, match="no text file"):
    w2v.load_corpus("text", str(tmp_path / "*.nothing"))


def test_text_corpus_is_simple_preprocess(tmp_path):
  (tmp_path / "a.txt").write_text("The Cat's hat, a HAT!\nsecond line x\n")
  (tmp_path / "b.txt").write_text("Third LINE\n")
  assert w2v.load_corpus("text", str(tmp_path / "*.txt")) == [
      ["the", "cat", "hat", "hat"], ["second", "line"], ["third", "line"]]


def test_subsampling_keeps_the_expected_fraction():
  counts = np.array([50000, 20000, 5000, 1000, 100])
  ids = np.repeat(np.arange(5), counts)
  keep_prob = w2v.keep_probabilities(counts, 1e-3)      # threshold 76.1
  assert keep_prob[-1] == 1.0 and keep_prob[0] < 0.05
  keep = w2v.subsample(np.random.default_rng(0), ids, keep_prob)
  kept = np.bincount(ids[keep], minlength=5)
  std = np.sqrt(counts * keep_prob * (1 - keep_prob))
  assert np.all(np.abs(kept - counts * keep_prob) <= 4 * std + 1e-9), (kept, counts * keep_prob)
  # Re-drawn every epoch: two epochs keep different tokens, the same number on average.
  keep2 = w2v.subsample(np.random.default_rng(1), ids, keep_prob)
  assert (keep != keep2).any()


def test_dynamic_window_pair_distribution():
  window, length = 5, 20000
  corpus = distinct_corpus([length])
  batches = w2v.SkipGramBatches(corpus, np.ones(length), window=window, sample=0,
                                chunk_size=64, chunks=64, epochs=1)
  batch_list = list(batches.epoch(0))
  n = [b["num_pairs"] for b in batch_list]
  centers = np.concatenate([b["centers"].ravel()[:k] for b, k in zip(batch_list, n)])
  contexts = np.concatenate([b["contexts"].ravel()[:k] for b, k in zip(batch_list, n)])
  assert sum(b["words"] for b in batch_list) == length
  interior = (centers >= window) & (centers < length - window)
  # Each centre draws w uniform in 1..window and pairs with 2w neighbours.
  per_center = np.bincount(centers[interior] - window, minlength=length - 2 * window)
  hist = np.bincount(per_center, minlength=2 * window + 1)[2::2]
  assert hist.sum() == length - 2 * window and np.bincount(per_center)[1::2].sum() == 0
  assert stats.chisquare(hist).pvalue > 1e-3, hist
  # Offset o is used when w >= o: P(|o|) proportional to window - o + 1.
  offsets = np.abs(contexts[interior].astype(int) - centers[interior])
  got = np.bincount(offsets, minlength=window + 1)[1:]
  expected = (window - np.arange(window) ) / (window * (window + 1) / 2) * got.sum()
  assert stats.chisquare(got, expected).pvalue > 1e-3, (got, expected)
  # Total pairs: interior centres give window + 1 pairs on average.
  mean = interior.sum() / (length - 2 * window)
  assert abs(mean - (window + 1)) < 0.05


def test_pairs_stay_inside_sentences_and_in_order():
  corpus = distinct_corpus([3, 1, 7])
  windows = np.full(11, 2)
  ctr, ctx, pos = w2v.window_pairs(corpus.ids, corpus.sentence_ids, windows, 2)
  sent = corpus.sentence_ids
  assert (sent[ctr] == sent[ctx]).all()
  np.testing.assert_array_equal(ctr[:6], [0, 0, 1, 1, 2, 2])
  np.testing.assert_array_equal(ctx[:6], [1, 2, 0, 2, 0, 1])
  assert (np.diff(pos) >= 0).all() and 3 not in ctr   # the one-word sentence has no pairs


def test_negatives_follow_counts_power_and_never_equal_the_context():
  counts = np.array([1000, 400, 300, 120, 80, 50, 30, 10, 5, 5])
  sampler = CumulativeSampler(counts, 0.75)
  rng = np.random.default_rng(0)
  contexts = rng.choice(10, 40000, p=sampler.probs).astype(np.int32)
  neg = w2v.draw_negatives(sampler, rng, contexts, 5, block=1000)
  assert neg.shape == (40000, 5) and neg.dtype == np.int32
  assert not (neg == contexts[:, None]).any()
  # Expected counts: p ~ counts ** 0.75, renormalised without each row's context.
  p = counts ** 0.75 / (counts ** 0.75).sum()
  per_ctx = np.bincount(contexts, minlength=10)
  expected = sum(per_ctx[c] * 5 * np.where(np.arange(10) == c, 0, p) / (1 - p[c])
                 for c in range(10))
  observed = np.bincount(neg.ravel(), minlength=10)
  assert stats.chisquare(observed, expected).pvalue > 1e-3, (observed, expected)
  # Consecutive draws are independent (the sorted-block trick must not leak order). A
  # row's draws share its exclusion, so this check uses one rare context for all rows.
  neg = w2v.draw_negatives(sampler, rng, np.full(40000, 9, np.int32), 5, block=1000)
  flat = np.minimum(neg.ravel(), 3)
  table = np.zeros((4, 4))
  np.add.at(table, (flat[:-1], flat[1:]), 1)
  assert stats.chi2_contingency(table).pvalue > 1e-3


def test_batches_pad_and_decay_the_learning_rate():
  corpus = distinct_corpus([500, 300])
  batches = w2v.SkipGramBatches(corpus, np.ones(800), window=3, negatives=2, sample=0,
                                chunk_size=32, chunks=8, epochs=2, alpha=0.025, min_alpha=1e-4,
                                lr_decay="words")   # "sentences": tests/word2vec/test_schedule
  b0 = list(batches.epoch(0))
  b1 = list(batches.epoch(1))
  first, last = b0[0], b1[-1]
  assert first["centers"].shape == (8, 32) and first["negatives"].shape == (8, 32, 2)
  assert first["lr"][0] == np.float32(0.025)
  n = int(last["num_pairs"])
  assert 0 < n < 256 and not last["centers"].ravel()[n:].any()   # the tail is padding
  lrs = np.concatenate([b["lr"][:-(-int(b["num_pairs"]) // 32)] for b in b0 + b1])
  assert (np.diff(lrs) <= 0).all() and lrs[-1] > 1e-4
  np.testing.assert_allclose(lrs[-1], 1e-4, atol=0.025 / 800 * 10)
  # Same epoch, same seed: the same stream (resumable by epoch); another epoch differs.
  again = next(batches.epoch(0))
  np.testing.assert_array_equal(again["negatives"], first["negatives"])
  assert not np.array_equal(b1[0]["negatives"], first["negatives"])


def test_an_epoch_resumed_after_any_batch_goes_on_as_it_would_have():
  """epoch(e, resume=batch k's position) yields exactly batches k+1.. of the epoch (arrays,
  words, learning rates, positions), for every k: including after a block that gave two
  batches (long sentences, many pairs a centre) and among one-word sentences (centres
  without pairs)."""
  rng = np.random.default_rng(3)
  lengths = [int(n) for n in rng.choice([1, 1, 2, 9, 40, 120], 60)]
  corpus = w2v.EncodedCorpus(rng.integers(0, 50, sum(lengths)).astype(np.int32),
                             np.repeat(np.arange(60), lengths).astype(np.int32),
                             np.array(lengths))
  batches = w2v.SkipGramBatches(corpus, np.bincount(corpus.ids, minlength=50) + 1, window=4,
                                negatives=3, sample=1e-2, chunk_size=8, chunks=4, epochs=2)
  whole = list(batches.epoch(1))
  assert len(whole) > 100
  words = [b["words"] for b in whole]
  assert 0 in words[:-1] and sum(words) <= corpus.ids.shape[0]  # a block gave two batches
  # After the first batches, around every block that gave two, every 25th and the last
  # but one (each k regenerates the epoch's pairs: all ~200 would take 15 s).
  two = [i for i, w in enumerate(words[:-1]) if w == 0]
  ks = sorted({0, 1, len(whole) - 2, *range(0, len(whole), 25),
               *(k for i in two for k in (i - 2, i - 1, i) if k >= 0)})
  for k in ks:
    rest = list(batches.epoch(1, resume=whole[k]["position"]))
    assert len(rest) == len(whole) - k - 1, k
    assert all(got.keys() == want.keys() for got, want in zip(rest, whole[k + 1:]))
    for key in ("centers", "contexts", "negatives", "lr", "num_pairs"):
      np.testing.assert_array_equal(np.stack([b[key] for b in rest]),
                                    np.stack([b[key] for b in whole[k + 1:]]), f"{k} {key}")
    assert [(b["words"], b["position"]) for b in rest] == [
        (b["words"], b["position"]) for b in whole[k + 1:]], k
  # The stream resumes in its first epoch only, then runs the next epochs from their start.
  stream = list(batches.stream(0, resume=list(batches.epoch(0))[2]["position"]))
  assert [e for e, b in stream if b is None] == [0, 1]
  np.testing.assert_array_equal(stream[-2][1]["negatives"], whole[-1]["negatives"])
  # A position past this epoch's pairs (another corpus or settings) is one clear error.
  far = dict(whole[-2]["position"], pairs=10 ** 9)
  with pytest.raises(ValueError, match=r"position in epoch 2 is pair 1000000000, but this "
                                       r"run's epoch has \d+ pairs: the corpus or the stream"):
    list(batches.epoch(1, resume=far))
