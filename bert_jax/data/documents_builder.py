"""The documents level: a corpus's documents as a tfds dataset (array_record).

`DocumentsBuilder` writes the documents that corpora.py reads, each stored as its
sentences on lines (`document_text`), split into train/validation by a hash of the
document's text (`is_validation`: deterministic, order-free, duplicates land on the same
side). beam_documents.py builds the same dataset with Beam from the same pieces.
`LocalBuilder` is the base of every builder of local data here (also the instances
level's, instances_builder.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Callable, Iterator, Optional

import tensorflow_datasets as tfds

from bert_jax.data import text_cleaning


def document_text(sentences: list[str]) -> str:
  """A document as stored: its sentences on lines."""
  return "\n".join(s.replace("\n", " ") for s in sentences)


def is_validation(text: str, fraction: float) -> bool:
  """Deterministic document split: a 64-bit hash of the text against the fraction."""
  digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
  return int.from_bytes(digest, "little") < fraction * 2.0**64


def assign_split(text: str, fraction: float, stats: text_cleaning.Stats) -> bool:
  """is_validation, counted: documents and characters per split (the vocabulary's
  sample size comes from train_characters)."""
  in_validation = is_validation(text, fraction)
  split = "validation" if in_validation else "train"
  stats[split + "_documents"] += 1
  stats[split + "_characters"] += len(text)
  return in_validation


class LocalBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """A builder of local data: no downloads, so no checksums file to locate."""

  VERSION = tfds.core.Version("1.0.0")

  # tfds finds a builder's checksums beside its code via importlib resources, which for
  # a package outside tensorflow_datasets needs the `importlib_resources` backport (not
  # a dependency of ours). Nothing here is downloaded: there is no checksums file.
  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls):
    return None


class DocumentsBuilder(LocalBuilder, skip_registration=True):
  """Documents (sentences joined by newlines) in a train and a validation split.

  The corpus is read once: the train pass writes the validation documents to a spill
  file (one JSON string a line, on disk so memory stays bounded) that the validation
  pass replays. Stats are those of the full read.
  """

  def __init__(self, *,
               documents_fn: Callable[[text_cleaning.Stats],
                                      Iterator[tuple[str, list[str]]]],
               validation_fraction: float, splits=("train", "validation"),
               spill_dir: Optional[str] = None, **kwargs):
    """Args:
      documents_fn: stats -> iterator of (key, document) (streamed), corpora.keyed_documents.
      validation_fraction: expected fraction of documents in the validation split.
      splits: the splits to write (tfds refuses an empty one: a corpus too small for
        a validation document is written with "train" only).
      spill_dir: where the validation spill file goes (default: the system temp dir).
      **kwargs: tfds builder args (data_dir, file_format='array_record').
    """
    self._documents_fn = documents_fn
    self._validation_fraction = validation_fraction
    self._splits = tuple(splits)
    self._spill_dir = spill_dir
    self._spill = None  # path, once a train pass has completed it
    self.stats = text_cleaning.Stats()
    super().__init__(**kwargs)

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self, description="Documents of sentences for BERT instances.",
        features=tfds.features.FeaturesDict({"text": tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    del dl_manager  # local or already downloaded sources
    return {split: self._generate_examples(split == "validation") for split in self._splits}

  def _read_corpus(self):
    """(key, text, in_validation) of every document; refreshes self.stats."""
    stats = text_cleaning.Stats()
    for key, sentences in self._documents_fn(stats):
      text = document_text(sentences)
      yield key, text, assign_split(text, self._validation_fraction, stats)
    self.stats.clear()
    self.stats.update(stats)

  def _generate_examples(self, validation: bool):
    if validation and self._spill:  # replay what the train pass set aside
      with open(self._spill, encoding="utf-8") as f:
        for line in f:
          i, text = json.loads(line)
          yield i, {"text": text}
      os.remove(self._spill)
      self._spill = None
      return
    spill = None
    if not validation and "validation" in self._splits:
      fd, path = tempfile.mkstemp(prefix="validation-", suffix=".jsonl", dir=self._spill_dir)
      spill = os.fdopen(fd, "w", encoding="utf-8")
    try:
      for i, text, in_validation in self._read_corpus():
        if in_validation == validation:
          yield i, {"text": text}
        elif spill:
          spill.write(json.dumps([i, text]) + "\n")
    finally:
      if spill:
        spill.close()
    if spill:
      self._spill = path
