"""The vocabulary stage: ONE deterministic WordPiece vocabulary, in process or on Beam.

Both paths count the words of the same document sample (wordpiece.in_sample: a hash of
each train document's text against a fraction) and train wordpiece.train on the summed
counts, which depend neither on order nor on who counted: the same corpus and config
give the same vocab.txt bytes on every run and every host, whichever path built it.

The sample: about `sample_characters` (default 1e9, config.data.vocab_sample_chars) of
the train documents. A 30k WordPiece vocabulary is decided by the frequent words and
pieces: in 1e9 characters of English (~1.7e8 words) the 30,000th most frequent word
still occurs a few hundred times, so sampling moves only the last merges, whose counts
differ by noise anyway. It keeps the one-worker merge step to minutes and a few GB.
On Beam, workers count their document ranges, a CombinePerKey adds the counts, and one
worker trains and writes vocab.txt (atomically: local or gs://).
"""
from __future__ import annotations

import collections

import tensorflow_datasets as tfds

from bert_jax.data.beam import remote as beam_remote
from bert_jax.data import instances_builder
from bert_jax.data import tokenizer as tokenizer_lib
from bert_jax.data import wordpiece

_RANGE = 1024  # documents per counting task


def sampled_texts(source, fraction: float, lo: int = 0, hi=None):
  """Texts of the train documents [lo, hi) in the vocabulary's sample."""
  hi = len(source) if hi is None else hi
  for start in range(lo, hi, _RANGE):
    for text in instances_builder.shard_texts(source, start, min(start + _RANGE, hi)):
      if wordpiece.in_sample(text, fraction):
        yield text


def train_and_save(counts, path: str, vocab_size: int, lowercase: bool) -> None:
  tok = tokenizer_lib.from_word_counts(counts, vocab_size, lowercase)
  tokenizer_lib.save_vocab(tok, path)


def build_in_process(documents_dir: str, path: str, vocab_size: int, lowercase: bool,
                     fraction: float) -> None:
  from bert_jax.runtime import progress  # pylint: disable=g-import-not-at-top
  source = tfds.builder_from_directory(documents_dir).as_data_source(split="train")
  texts = progress.bar(sampled_texts(source, fraction), desc="vocab: documents", unit="doc")
  train_and_save(wordpiece.count_words(texts, lowercase), path, vocab_size, lowercase)


def _count_ranges(ranges, documents_dir: str, fraction: float, lowercase: bool):
  source = beam_remote.open_split(documents_dir, "train")
  texts = (t for lo, hi in ranges for t in sampled_texts(source, fraction, lo, hi))
  counts = wordpiece.count_words(texts, lowercase)
  if hasattr(source, "close"):  # a RemoteSplit's downloaded files
    source.close()
  return counts.items()


def _train_and_save_list(word_counts, path: str, vocab_size: int, lowercase: bool) -> None:
  train_and_save(collections.Counter(dict(word_counts)), path, vocab_size, lowercase)


def build_on_beam(run, documents_dir: str, path: str, vocab_size: int, lowercase: bool,
                  fraction: float) -> None:
  """The same vocabulary as build_in_process, counted by a Beam pipeline (`run`:
  beam_util.BeamRun)."""
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  n = beam_remote.num_examples(documents_dir, "train")
  ranges = [(lo, min(lo + _RANGE, n)) for lo in range(0, n, _RANGE)]
  groups = beam_remote.by_file(documents_dir, "train", ranges, lambda r: r[0])
  with run.pipeline() as pipeline:
    _ = (pipeline
         | "Ranges" >> beam.Create(groups)
         | "Spread" >> beam.Reshuffle()
         | "Count" >> beam.FlatMap(_count_ranges, documents_dir, fraction, lowercase)
         | "Sum" >> beam.CombinePerKey(sum)
         | "Gather" >> beam.combiners.ToList()
         | "Train" >> beam.Map(_train_and_save_list, path, vocab_size, lowercase))
