"""word2vec's learning rate: alpha -> min_alpha, linear in training progress.

Two ways to measure progress through an epoch (config.train.lr_decay):

  * "sentences" (the default): gensim 4's when a model is trained from sentences
    (`Word2Vec(sentences)` passes `total_examples=corpus_count`). Its job producer
    (gensim/models/word2vec.py `_job_producer`) packs consecutive sentences into jobs of at
    most `batch_words` (10000) raw words, a sentence that does not fit starting the next
    job, and gives every job the rate of the sentences pushed before it:
    progress = pushed sentences / corpus_count. Where sentence lengths vary (long articles
    beside short ones), most words are trained at a higher rate than by "words".
  * "words": word2vec.c's (and gensim's with `total_words` only): progress = tokens before
    this position / tokens of the corpus.

Either way alpha_t = max(min_alpha, alpha - (alpha - min_alpha) * (epoch + progress) /
epochs) (gensim's `_get_next_alpha`). Progress depends only on the position in the data,
so a run resumed at an epoch boundary continues the same schedule.
"""
from __future__ import annotations

import numpy as np

LR_DECAYS = ("sentences", "words")
GENSIM_BATCH_WORDS = 10000  # gensim's Word2Vec(batch_words=MAX_WORDS_IN_BATCH), words a job


def check_lr_decay(lr_decay: str) -> None:
  if lr_decay not in LR_DECAYS:
    raise ValueError(f"word2vec: unknown train.lr_decay {lr_decay!r}; use 'sentences' "
                     "(gensim 4's, progress by sentences) or 'words' (word2vec.c's).")


def gensim_job_progress(sentence_lengths: np.ndarray,
                        batch_words: int = GENSIM_BATCH_WORDS) -> np.ndarray:
  """Epoch progress at which gensim's job producer schedules each sentence: [S] float64.

  Args:
    sentence_lengths: [S] raw words of each sentence (out-of-vocabulary ones included, as
      gensim's `_raw_word_count`), in corpus order.
    batch_words: gensim's job size in raw words.

  Returns:
    For sentence s: the sentences pushed before its job / S. A job spans sentences
    i..j-1 with j the largest index whose words since i fit in batch_words (at least i + 1:
    a longer sentence is a job of its own), so the loop runs once per job, not per sentence.
  """
  lengths = np.asarray(sentence_lengths, np.int64)
  n = lengths.shape[0]
  cum = np.concatenate([[0], np.cumsum(lengths)])                  # [S + 1]
  job_start = np.empty(n, np.int64)
  i = 0
  while i < n:
    j = max(i + 1, int(np.searchsorted(cum, cum[i] + batch_words, side="right")) - 1)
    job_start[i:j] = i
    i = j
  return job_start / max(n, 1)


def linear_alpha(alpha: float, min_alpha: float, epoch: int, epochs: int,
                 progress: np.ndarray) -> np.ndarray:
  """gensim's `_get_next_alpha` at `progress` (fraction of epoch `epoch`), any shape."""
  frac = (epoch + np.asarray(progress, np.float64)) / epochs
  return np.maximum(min_alpha, alpha - (alpha - min_alpha) * frac)
