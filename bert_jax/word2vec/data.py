"""word2vec input pipeline on the host, numpy only: corpus, vocabulary, skip-gram pairs.

What gensim's Word2Vec does, vectorized:
  * corpus: the embedded corpus (the enwiki excerpt through gensim's own WikiCorpus
    tokenization, then gensim's `lee_background.cor` through `simple_preprocess`), or text files
    (one sentence per line, `simple_preprocess`: lowercase, 2..15 letters). Sentences
    longer than `max_sentence_length` (gensim's 10000) are split rather than truncated.
  * vocabulary: words with count >= min_count, by descending count (ties as gensim).
  * subsampling, re-drawn every epoch: keep w with probability
    (sqrt(f/(sample*total)) + 1) * (sample*total)/f, capped at 1 (gensim's `sample_int`).
  * dynamic window: each kept centre word draws its window uniformly in 1..window
    (gensim's `reduced_windows`), over the subsampled sentence, never across sentences.
  * negatives: k per pair from counts ** 0.75 through the shared CumulativeSampler,
    redrawn where they equal the pair's true context (`draw_negatives`).
  * learning rate: linear from alpha to min_alpha over all epochs, by sentences pushed
    (gensim 4's job producer) or by words (word2vec.c's): see schedule.py.

A batch holds `chunks` SGD chunks of `chunk_size` pairs in corpus order; the device scans
over the chunks, so one dispatch covers many sequential SGD updates.
"""
from __future__ import annotations

import bz2
import dataclasses
import functools
import glob
import queue
import threading
from typing import Iterable, Iterator, Optional, Sequence

import numpy as np

from bert_jax.data.sampling import CumulativeSampler
from bert_jax.word2vec import schedule

EMBEDDED_FILES = ("lee_background.cor",
                  "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
MAX_SENTENCE_LENGTH = 10000  # gensim's MAX_WORDS_IN_BATCH


def gensim_test_file(name: str) -> str:
  """Path of a file in gensim's shipped test data (corpora and benchmarks)."""
  from gensim.test.utils import datapath  # pylint: disable=g-import-not-at-top
  return datapath(name)


def _split(tokens: list[str], max_len: int) -> Iterator[list[str]]:
  for i in range(0, len(tokens), max_len):
    yield tokens[i:i + max_len]


@functools.lru_cache(maxsize=2)
def embedded_corpus(max_sentence_length: int = MAX_SENTENCE_LENGTH) -> tuple[tuple[str, ...], ...]:
  """The enwiki excerpt's articles, then the Lee background documents (one per line).

  The order of bert_jax.data.corpora's embedded documents. Under gensim's decay by
  sentences (schedule.py) it matters: the 116 article pieces hold 88% of the words, and
  first they are trained at the higher rates of each epoch.
  """
  return enwiki_sentences(max_sentence_length) + lee_sentences(max_sentence_length)


def lee_sentences(max_sentence_length: int = MAX_SENTENCE_LENGTH) -> tuple[tuple[str, ...], ...]:
  """gensim's `lee_background.cor`, one news story a line, `simple_preprocess`ed."""
  from gensim.utils import simple_preprocess  # pylint: disable=g-import-not-at-top
  sentences = []
  with open(gensim_test_file(EMBEDDED_FILES[0]), encoding="utf8") as f:
    for line in f:
      sentences.extend(_split(simple_preprocess(line), max_sentence_length))
  return tuple(tuple(s) for s in sentences if s)


def enwiki_sentences(max_sentence_length: int = MAX_SENTENCE_LENGTH) -> tuple[tuple[str, ...], ...]:
  """The articles of gensim's enwiki excerpt, tokenized as gensim's WikiCorpus does."""
  from gensim.corpora import wikicorpus  # pylint: disable=g-import-not-at-top
  sentences = []
  # WikiCorpus.get_texts without its process pool (forking a JAX process is unsafe):
  # the same page filter, tokenizer and the same pruning of stubs (< 50 tokens).
  with bz2.BZ2File(gensim_test_file(EMBEDDED_FILES[1])) as f:
    for title, text, pageid in wikicorpus.extract_pages(f, ("0",)):
      tokens, _, _ = wikicorpus.process_article((text, title, pageid))
      if len(tokens) < wikicorpus.ARTICLE_MIN_WORDS or any(
          title.startswith(ns + ":") for ns in wikicorpus.IGNORED_NAMESPACES):
        continue
      sentences.extend(_split(tokens, max_sentence_length))
  return tuple(tuple(s) for s in sentences if s)


def text_corpus(pattern: str, max_sentence_length: int = MAX_SENTENCE_LENGTH) -> list[list[str]]:
  """One sentence per line of every file matching the glob, `simple_preprocess`ed."""
  from gensim.utils import simple_preprocess  # pylint: disable=g-import-not-at-top
  files = sorted(glob.glob(pattern, recursive=True))
  if not files:
    raise FileNotFoundError(f"word2vec: no text file matches {pattern!r}.")
  sentences = []
  for path in files:
    with open(path, encoding="utf8", errors="replace") as f:
      for line in f:
        sentences.extend(s for s in _split(simple_preprocess(line), max_sentence_length) if s)
  return sentences


def load_corpus(corpus: str, text_glob: str = "") -> Sequence[Sequence[str]]:
  """corpus: 'embedded' or 'text' (files of `text_glob`)."""
  if corpus == "embedded":
    return embedded_corpus()
  if corpus == "text":
    return text_corpus(text_glob)
  raise ValueError(f"word2vec: unknown corpus {corpus!r}; use 'embedded' or 'text'.")


@dataclasses.dataclass(frozen=True)
class Vocab:
  words: tuple[str, ...]   # id -> word, by descending count
  counts: np.ndarray       # [V] int64

  @functools.cached_property
  def index(self) -> dict[str, int]:
    return {w: i for i, w in enumerate(self.words)}

  def __len__(self) -> int:
    return len(self.words)


def build_vocab(sentences: Iterable[Sequence[str]], min_count: int = 5) -> Vocab:
  """Words seen at least min_count times; raises a clear error on an empty corpus or vocab."""
  counts: dict[str, int] = {}
  for sentence in sentences:
    for w in sentence:
      counts[w] = counts.get(w, 0) + 1
  if not counts:
    raise ValueError("word2vec: the corpus is empty (no tokens after preprocessing).")
  words = [w for w, c in counts.items() if c >= min_count]
  if not words:
    raise ValueError(
        f"word2vec: the vocabulary is empty: no word occurs min_count={min_count} times "
        f"({sum(counts.values())} tokens, {len(counts)} distinct words, the most frequent "
        f"occurs {max(counts.values())} times). Lower min_count or use a larger corpus.")
  c = np.array([counts[w] for w in words], np.int64)
  # gensim's sort_by_descending_frequency: count descending, ties later-seen first.
  order = np.lexsort((-np.arange(len(words)), -c))
  return Vocab(tuple(words[i] for i in order), c[order])


@dataclasses.dataclass(frozen=True)
class EncodedCorpus:
  ids: np.ndarray               # [N] int32 in-vocabulary tokens (OOV dropped, as gensim does)
  sentence_ids: np.ndarray      # [N] int32 sentence of each token
  sentence_lengths: np.ndarray  # [S] int64 tokens of each sentence before dropping OOV

  @property
  def raw_words(self) -> int:
    return int(self.sentence_lengths.sum())


def encode(sentences: Iterable[Sequence[str]], vocab: Vocab) -> EncodedCorpus:
  index = vocab.index
  ids, sent, lengths = [], [], []
  for s, sentence in enumerate(sentences):
    lengths.append(len(sentence))
    row = [index[w] for w in sentence if w in index]
    ids.extend(row)
    sent.extend([s] * len(row))
  return EncodedCorpus(np.array(ids, np.int32), np.array(sent, np.int32),
                       np.array(lengths, np.int64))


def keep_probabilities(counts: np.ndarray, sample: float) -> np.ndarray:
  """gensim's subsampling keep probability per word id: [V] float64 in (0, 1]."""
  counts = np.asarray(counts, np.float64)
  total = counts.sum()
  if not sample:
    return np.ones_like(counts)
  threshold = sample * total if sample < 1.0 else int(sample * (3 + np.sqrt(5)) / 2)
  return np.minimum(1.0, (np.sqrt(counts / threshold) + 1) * (threshold / counts))


def subsample(rng: np.random.Generator, ids: np.ndarray, keep_prob: np.ndarray) -> np.ndarray:
  """Boolean keep mask [n] of one epoch's draw (gensim draws anew every epoch)."""
  return rng.random(ids.shape[0]) < keep_prob[ids]


def window_pairs(ids: np.ndarray, sentence_ids: np.ndarray, windows: np.ndarray,
                 max_window: int, start: int = 0, stop: int | None = None):
  """Skip-gram pairs of the centres ids[start:stop], each with its own window.

  Args:
    ids: [n] token ids of the (subsampled) corpus.
    sentence_ids: [n] sentence of each token; pairs never cross sentences.
    windows: [stop - start] effective window (1..max_window) of each centre.
    max_window: the configured window.

  Returns:
    (centers [P], contexts [P], center_positions [P]) in corpus order: centre by centre,
    contexts left to right, as gensim visits them.
  """
  n = ids.shape[0]
  stop = n if stop is None else stop
  pos = np.arange(start, stop)                                     # [m]
  offsets = np.concatenate([np.arange(-max_window, 0), np.arange(1, max_window + 1)])
  cpos = pos[:, None] + offsets[None, :]                           # [m, 2W]
  valid = (np.abs(offsets)[None, :] <= windows[:, None]) & (cpos >= 0) & (cpos < n)
  cpos = np.clip(cpos, 0, n - 1)
  valid &= sentence_ids[cpos] == sentence_ids[pos][:, None]
  counts = valid.sum(1)
  return np.repeat(ids[pos], counts), ids[cpos[valid]], np.repeat(pos, counts)


def draw_negatives(sampler: CumulativeSampler, rng: np.random.Generator,
                   contexts: np.ndarray, k: int, block: int = 16384) -> np.ndarray:
  """[n, k] iid draws of `sampler`, none equal to its row's context: int32.

  The uniforms are made in sorted blocks (normalised cumulative sums of exponentials are
  the order statistics of iid uniforms), so the sampler's inverse cdf (`from_uniform`,
  a searchsorted) walks its table forward: about 2x faster than on random uniforms. A
  uniform shuffle of each block gives back iid draws. Draws that hit their row's context
  are redrawn by the sampler itself (`sample(exclude=)`).
  """
  n = contexts.shape[0]
  flat = np.empty(n * k, np.int64)
  for start in range(0, n * k, block):
    m = min(block, n * k - start)
    spacings = np.cumsum(rng.standard_exponential(m + 1))
    ids = sampler.from_uniform(spacings[:-1] / spacings[-1])
    rng.shuffle(ids)
    flat[start:start + m] = ids
  neg = flat.reshape(n, k)
  bad = neg == contexts[:, None]
  if bad.any():
    neg[bad] = sampler.sample(rng, (int(bad.sum()),),
                              exclude=np.broadcast_to(contexts[:, None], neg.shape)[bad])
  return neg.astype(np.int32)


@dataclasses.dataclass
class SkipGramBatches:
  """Yields the training batches of one epoch (a dict of numpy arrays, see `epoch`)."""
  corpus: EncodedCorpus
  counts: np.ndarray
  window: int = 5
  negatives: int = 5
  sample: float = 1e-3
  ns_exponent: float = 0.75
  alpha: float = 0.025
  min_alpha: float = 1e-4
  lr_decay: str = "sentences"  # schedule.LR_DECAYS
  epochs: int = 5
  chunk_size: int = 256
  chunks: int = 512
  seed: int = 0

  def __post_init__(self):
    schedule.check_lr_decay(self.lr_decay)
    self.sampler = CumulativeSampler(self.counts, self.ns_exponent)
    self.keep_prob = keep_probabilities(self.counts, self.sample)
    # [S] epoch progress of each sentence's gensim job (the "sentences" decay)
    self.sentence_progress = schedule.gensim_job_progress(self.corpus.sentence_lengths)

  @property
  def batch_pairs(self) -> int:
    return self.chunk_size * self.chunks

  def learning_rate(self, epoch: int, position: np.ndarray) -> np.ndarray:
    """The rate at corpus token positions `position` of `epoch` (schedule.py): progress
    through the epoch by the sentence's gensim job, or by position / N tokens."""
    if self.lr_decay == "sentences":
      progress = self.sentence_progress[self.corpus.sentence_ids[position]]
    else:
      progress = position / max(1, self.corpus.ids.shape[0])
    return schedule.linear_alpha(self.alpha, self.min_alpha, epoch, self.epochs, progress)

  def stream(self, first_epoch: int = 0,
             resume: Optional[dict] = None) -> Iterator[tuple[int, Optional[dict]]]:
    """(epoch, batch) over epochs first_epoch..epochs-1, with (epoch, None) ending each:
    one stream, so the host builds the next epoch's batches while this one finishes.
    resume: a batch's "position" in first_epoch (see `epoch`): the stream goes on right
    after that batch, exactly as it would have."""
    for epoch in range(first_epoch, self.epochs):
      for batch in self.epoch(epoch, resume if epoch == first_epoch else None):
        yield epoch, batch
      yield epoch, None

  def epoch(self, epoch: int, resume: Optional[dict] = None) -> Iterator[dict]:
    """Batches of one epoch. Each: centers/contexts [chunks, chunk_size] int32,
    negatives [chunks, chunk_size, k] int32, lr [chunks] float32, num_pairs int32 (the
    rest is padding), and host-side `words` (kept centre words it finishes) and
    `position`: {"pairs": the epoch's pairs up to this batch, "rng": the generator's
    state after it} (JSON), from which `resume` continues the epoch after that batch.

    Resuming redoes only the epoch's first draws (subsampling, windows) and the pairs of
    the blocks before the position (numpy, no draws), then sets the generator to the
    saved state: the negatives of the skipped batches, most of the host's work and the
    only draws after the first, are not drawn again.
    """
    rng = np.random.default_rng((self.seed, epoch))  # per epoch: resumable by epoch
    c = self.corpus
    keep = subsample(rng, c.ids, self.keep_prob)
    ids, sent, orig_pos = c.ids[keep], c.sentence_ids[keep], np.flatnonzero(keep)
    windows = rng.integers(1, self.window + 1, ids.shape[0])
    block = max(1, self.batch_pairs // (self.window + 1))  # about one batch of pairs
    pending: list[tuple[np.ndarray, ...]] = []
    have, words, emitted = 0, 0, 0
    skip = 0 if resume is None else int(resume["pairs"])  # pairs trained before `resume`
    for start in range(0, ids.shape[0], block):
      stop = min(start + block, ids.shape[0])
      ctr, ctx, pos = window_pairs(ids, sent, windows[start:stop], self.window, start, stop)
      if skip:  # this block's words went to the batches before `resume`
        cut = min(skip, ctr.shape[0])
        ctr, ctx, pos, skip, emitted = ctr[cut:], ctx[cut:], pos[cut:], skip - cut, emitted + cut
        if not skip:
          rng.bit_generator.state = resume["rng"]
      else:
        words += stop - start
      pending.append((ctr, ctx, orig_pos[pos]))
      have += ctr.shape[0]
      while have >= self.batch_pairs:
        batch, pending = self._take(pending, self.batch_pairs)
        have -= self.batch_pairs
        emitted += self.batch_pairs
        yield self._finish(rng, epoch, batch, words, emitted)
        words = 0
    if skip:
      raise ValueError(
          f"word2vec: a checkpoint's position in epoch {epoch + 1} is pair {resume['pairs']}, "
          f"but this run's epoch has {emitted} pairs: the corpus or the stream's settings "
          "(data.window, data.sample, train.chunk_size, train.chunks_per_step, seed) changed "
          "since it was saved. Use a new --workdir, or the config it was saved with.")
    if have or words:
      batch, _ = self._take(pending, have)
      yield self._finish(rng, epoch, batch, words, emitted + have)

  @staticmethod
  def _take(pending, n):
    """The first n pending pairs, and the rest still pending."""
    if not pending:
      empty = np.zeros(0, np.int64)
      return (empty, empty, empty), []
    ctr, ctx, pos = (np.concatenate(a) for a in zip(*pending))
    rest = [(ctr[n:], ctx[n:], pos[n:])] if ctr.shape[0] > n else []
    return (ctr[:n], ctx[:n], pos[:n]), rest

  def _finish(self, rng, epoch, batch, words, emitted) -> dict:
    ctr, ctx, pos = batch
    n, size, k = ctr.shape[0], self.batch_pairs, self.negatives
    neg = draw_negatives(self.sampler, rng, ctx, k)
    def pad(a, shape):
      out = np.zeros(shape, np.int32)
      out.reshape(size, -1)[:n] = a.reshape(n, -1)
      return out
    first = np.minimum(np.arange(self.chunks) * self.chunk_size, max(n - 1, 0))
    lr = self.learning_rate(epoch, pos[first] if n else np.zeros(self.chunks, np.int64))
    return dict(centers=pad(ctr, (self.chunks, self.chunk_size)),
                contexts=pad(ctx, (self.chunks, self.chunk_size)),
                negatives=pad(neg, (self.chunks, self.chunk_size, k)),
                lr=lr.astype(np.float32), num_pairs=np.int32(n), words=words,
                position=dict(pairs=int(emitted), rng=rng.bit_generator.state))


def prefetch(iterator: Iterator, size: int = 2) -> Iterator:
  """Runs `iterator` in a background thread, `size` items ahead (numpy work drops the GIL).

  The thread starts at once, not at the first `next`, so the caller can do other work
  (e.g. compile the step) while the first items are being made.
  """
  q: queue.Queue = queue.Queue(maxsize=size)
  done, stop = object(), threading.Event()

  def produce():
    try:
      for item in iterator:
        while not stop.is_set():
          try:
            q.put(item, timeout=0.1)
            break
          except queue.Full:
            continue
        if stop.is_set():
          return
      q.put(done)
    except BaseException as e:  # pylint: disable=broad-except  (re-raised in the consumer)
      q.put(e)

  def consume():
    try:
      while True:
        item = q.get()
        if item is done:
          return
        if isinstance(item, BaseException):
          raise item
        yield item
    finally:
      stop.set()

  threading.Thread(target=produce, daemon=True, name="word2vec-batches").start()
  return consume()
