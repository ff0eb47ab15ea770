"""Deterministic WordPiece training from word counts (the same vocab.txt bytes every run).

tokenizers' WordPieceTrainer (0.23) gives the `##` alphabet ids in hash-map order, and
its merge queue breaks count ties on ids, so two runs on the same text can pick
different merges near the vocabulary cutoff (huggingface/tokenizers#1794). Hosts that
each trained a vocabulary could then disagree on token ids. This trainer runs the same
algorithm (BPE merges over words split into a first character and `##` continuation
characters, the most frequent adjacent pair merged first, ties to the smaller ids) with
ids that do not depend on hash order, so its output depends on the multiset of word
counts only. Word counts
add up, so they can be computed anywhere (one process here, Beam workers in
data/beam/vocab.py) and combined in any order.

  counts = count_words(texts, lowercase=True)         # Counter: word -> count
  tokens = train(counts, vocab_size=30522)             # [PAD] [UNK] [CLS] [SEP] [MASK] ...
"""
from __future__ import annotations

import collections
import hashlib
import heapq
from typing import Iterable, Mapping

from tokenizers import normalizers, pre_tokenizers

PREFIX = "##"
# Documents whose sampling hash is below fraction * 2**64 feed the vocabulary: a sample
# that does not depend on order, worker count or which host computes it.
_SAMPLE_PERSON = b"bert_jax-vocab"


def in_sample(text: str, fraction: float) -> bool:
  """The vocabulary's deterministic document sample (a hash independent of the
  train/validation split's, documents_builder.is_validation)."""
  if fraction >= 1.0:
    return True
  digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, person=_SAMPLE_PERSON)
  return int.from_bytes(digest.digest(), "little") < fraction * 2.0**64


def sample_fraction(train_characters: int, sample_characters: int) -> float:
  """Fraction of train documents to count so about `sample_characters` are read."""
  if not train_characters or sample_characters <= 0:
    return 1.0
  return min(1.0, sample_characters / train_characters)


class WordCounter:
  """Counts the words of texts as BERT's pipeline splits them (BertNormalizer, then
  BertPreTokenizer: whitespace and each punctuation character); the Rust normalizer and
  pre-tokenizer do the work, a Counter adds them up."""

  def __init__(self, lowercase: bool):
    self._normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase)
    self._pre_tokenizer = pre_tokenizers.BertPreTokenizer()

  def words(self, text: str) -> list[str]:
    return [w for w, _ in self._pre_tokenizer.pre_tokenize_str(
        self._normalizer.normalize_str(text))]

  def count(self, texts: Iterable[str], counts=None) -> collections.Counter:
    counts = collections.Counter() if counts is None else counts
    for text in texts:
      counts.update(self.words(text))
    return counts


def count_words(texts: Iterable[str], lowercase: bool = True) -> collections.Counter:
  return WordCounter(lowercase).count(texts)


def _merged(a: str, b: str) -> str:
  return a + (b[len(PREFIX):] if b.startswith(PREFIX) else b)


def train(word_counts: Mapping[str, int], vocab_size: int, special_tokens=(),
          min_frequency: int = 2, limit_alphabet: int = 1000,
          max_words: int = 1 << 21) -> list[str]:
  """The vocabulary (id order) learnt from word counts; deterministic.

  Layout: special_tokens, the alphabet (the `limit_alphabet` most frequent characters,
  in code point order), its `##` forms that occur, then merged tokens in merge order.
  Merging stops at `vocab_size` or when no pair occurs `min_frequency` times.

  Args:
    word_counts: word -> count (a word holds no whitespace).
    max_words: only the most frequent distinct words take part (ties: by string), which
      bounds memory on huge samples; words past it are rare by construction.
  """
  if len(word_counts) > max_words:
    kept = sorted(word_counts.items(), key=lambda wc: (-wc[1], wc[0]))[:max_words]
    word_counts = dict(kept)
  char_counts = collections.Counter()
  for word, n in word_counts.items():
    for c in word:
      char_counts[c] += n
  alphabet = sorted(sorted(char_counts, key=lambda c: (-char_counts[c], c))[:limit_alphabet])
  allowed = set(alphabet)

  vocab = list(dict.fromkeys(special_tokens))
  ids = {t: i for i, t in enumerate(vocab)}

  def add(token: str) -> int:
    if token not in ids:
      ids[token] = len(vocab)
      vocab.append(token)
    return ids[token]

  for c in alphabet:
    add(c)
  # Words as symbol-id lists: first character as is, the others in their `##` form.
  # Characters outside the alphabet are dropped, as tokenizers' trainer does.
  words, counts = [], []
  continuation = set()
  for word in sorted(word_counts):
    chars = [c for c in word if c in allowed]
    if chars:
      continuation.update(chars[1:])
      words.append(chars)
      counts.append(word_counts[word])
  for c in sorted(continuation):
    add(PREFIX + c)
  words = [[ids[w[0]]] + [ids[PREFIX + c] for c in w[1:]] for w in words]

  pair_counts = collections.Counter()
  where = collections.defaultdict(set)  # pair -> indices of words holding it
  for i, (w, n) in enumerate(zip(words, counts)):
    for pair in zip(w, w[1:]):
      pair_counts[pair] += n
      where[pair].add(i)
  # Max-heap on count; ties go to the pair of smaller ids, as in tokenizers' trainer, but
  # ids here are deterministic (sorted alphabet, merges in order): (-count, pair).
  heap = [(-n, p) for p, n in pair_counts.items()]
  heapq.heapify(heap)
  while len(vocab) < vocab_size and heap:
    neg, pair = heapq.heappop(heap)
    current = pair_counts.get(pair, 0)
    if current != -neg:  # stale entry: requeue with its current count
      if current > 0:
        heapq.heappush(heap, (-current, pair))
      continue
    if current < min_frequency:
      break
    new = add(_merged(vocab[pair[0]], vocab[pair[1]]))
    a, b = pair
    touched = set()  # pairs holding `new`: the only ones whose counts grow
    for i in where.pop(pair):
      w = words[i]
      out, j, last = [], 0, len(w) - 1
      while j <= last:
        if j < last and w[j] == a and w[j + 1] == b:
          out.append(new)
          j += 2
        else:
          out.append(w[j])
          j += 1
      if len(out) == len(w):  # the word lost this pair to an earlier merge
        continue
      n = counts[i]
      for p in zip(w, w[1:]):
        pair_counts[p] -= n
      for p in zip(out, out[1:]):
        pair_counts[p] += n
        if new in p:
          where[p].add(i)
          touched.add(p)
      words[i] = out
    pair_counts.pop(pair, None)
    for p in touched:
      heapq.heappush(heap, (-pair_counts[p], p))
  return vocab
