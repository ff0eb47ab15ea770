"""Learning-rate schedules: gensim 4's decay by sentences (its job producer) and by words."""
import queue

import numpy as np
import pytest

from bert_jax.word2vec import data as w2v
from bert_jax.word2vec import schedule


def gensim_sentence_alphas(lengths, epoch, epochs, batch_words, alpha=0.025, min_alpha=1e-4):
  """Per sentence, the alpha gensim 4.4's own job producer gives it (the reference)."""
  from gensim.models import Word2Vec
  model = Word2Vec(alpha=alpha, min_alpha=min_alpha, epochs=epochs, batch_words=batch_words,
                   workers=1)
  sentences = [[f"w{i}"] * n for i, n in enumerate(lengths)]
  jobs = queue.Queue()
  model._job_producer(iter(sentences), jobs, cur_epoch=epoch,   # pylint: disable=protected-access
                      total_examples=len(sentences))
  out = []
  while (job := jobs.get()) is not None:
    batch, job_alpha = job
    out += [job_alpha] * len(batch)
  assert len(out) == len(lengths)
  return np.array(out)


def test_job_progress_by_hand():
  # batch_words 10: jobs [6, 3] | [2] (2 + 9 > 10) | [9, 1] | [4]; sentences pushed before
  # each job: 0, 2, 3, 5 of 6.
  lengths = [6, 3, 2, 9, 1, 4]
  progress = schedule.gensim_job_progress(lengths, batch_words=10)
  np.testing.assert_array_equal(progress, np.array([0, 0, 2, 3, 3, 5]) / 6)
  # Epoch 2 of 2 (epoch index 1), alpha 0.025 -> 1e-4: 0.025 - 0.0249 * (1 + p) / 2.
  alphas = schedule.linear_alpha(0.025, 1e-4, 1, 2, progress)
  np.testing.assert_allclose(alphas[[0, 2, 3, 5]],
                             [0.01255, 0.025 - 0.0249 * 2 / 3, 0.006325, 0.025 - 0.0249 * 11 / 12],
                             rtol=1e-12)
  assert alphas[2] == pytest.approx(0.0084)


@pytest.mark.parametrize("batch_words,lengths", [
    (10, [6, 3, 2, 9, 1, 4]),
    # A sentence longer than a job (its own job), empty sentences after a full job and
    # after an over-long one, a job filled exactly.
    (10, [12, 0, 3, 7, 0, 0, 10, 0, 5, 25, 1, 0]),
    (10000, [307, 154, 9834, 7688, 2666, 1546, 10000, 1732, 5921, 10000, 4503, 10000, 0, 12]
     + [150] * 300),
])
def test_sentence_decay_equals_gensims_job_producer(batch_words, lengths):
  for epoch in (0, 2):
    ours = schedule.linear_alpha(0.025, 1e-4, epoch, 3,
                                 schedule.gensim_job_progress(lengths, batch_words))
    np.testing.assert_array_equal(ours, gensim_sentence_alphas(lengths, epoch, 3, batch_words))


def test_batches_take_the_rate_of_their_first_pairs_sentence():
  lengths = [6000, 3000, 2000, 8000, 500, 4000]   # jobs [0, 1] [2, 3] [4, 5] of 10000 words
  n = sum(lengths)
  corpus = w2v.EncodedCorpus(np.arange(n, dtype=np.int32),
                             np.repeat(np.arange(6), lengths).astype(np.int32),
                             np.array(lengths))
  reference = {epoch: gensim_sentence_alphas(lengths, epoch, 2, 10000) for epoch in (0, 1)}
  for decay in ("sentences", "words"):
    batches = w2v.SkipGramBatches(corpus, np.ones(n), window=2, negatives=1, sample=0,
                                  chunk_size=64, chunks=16, epochs=2, lr_decay=decay)
    seen = set()
    for epoch in (0, 1):
      for b in batches.epoch(epoch):
        used = -(-int(b["num_pairs"]) // 64)
        position = b["centers"][:used, 0]          # token id == corpus position
        sentence = corpus.sentence_ids[position]
        if decay == "sentences":
          expected = reference[epoch][sentence]
          seen |= set(expected.tolist())
        else:  # word2vec.c's: by tokens before the position
          expected = 0.025 - (0.025 - 1e-4) * (epoch + position / n) / 2
        np.testing.assert_allclose(b["lr"][:used], expected, rtol=1e-6)
    if decay == "sentences":
      assert len(seen) == 6   # 3 jobs x 2 epochs: the rate steps at job boundaries


def test_resuming_at_an_epoch_gives_the_same_stream():
  lengths = [6000, 3000, 2000, 8000, 500, 4000]
  n = sum(lengths)
  corpus = w2v.EncodedCorpus(np.arange(n, dtype=np.int32),
                             np.repeat(np.arange(6), lengths).astype(np.int32),
                             np.array(lengths))
  batches = w2v.SkipGramBatches(corpus, np.ones(n), window=2, negatives=1, sample=0.01,
                                chunk_size=64, chunks=16, epochs=3, seed=4)
  full = [b for e, b in batches.stream(0) if e == 2 and b is not None]
  resumed = [b for _, b in batches.stream(2) if b is not None]
  assert len(full) == len(resumed) > 1
  for a, b in zip(full, resumed):
    for k in ("centers", "negatives", "lr"):
      np.testing.assert_array_equal(a[k], b[k])


def test_unknown_decay_is_a_clear_error():
  with pytest.raises(ValueError, match="unknown train.lr_decay 'lines'.*'sentences'.*'words'"):
    schedule.check_lr_decay("lines")
