"""The documents stage as a Beam pipeline, through tfds's Beam support.

BeamDocumentsBuilder writes what documents_builder.DocumentsBuilder writes (same features, keys,
split by the same hash), so the two outputs hold the same records in the same order and
everything downstream reads either. Each split's `_generate_examples` is a PTransform:
the corpus sources (one per text file, the embedded files, ranges of a tfds split) are
spread over workers by a Reshuffle, each read once and sentence-split where it lands
(text files and tfds datasets on gs:// too: data/beam/remote.py), then partitioned into
the splits. Bad
input (undecodable bytes, over-long lines, empty documents or files) is counted into
Beam counters, which become the build's stats (corpus_stats.json), as in process.
"""
from __future__ import annotations

import os

import tensorflow_datasets as tfds

from bert_jax.runtime import paths
from bert_jax.data.beam import remote as beam_remote
from bert_jax.data.beam import util as beam_util
from bert_jax.data import corpora
from bert_jax.data import documents_builder
from bert_jax.data import text_cleaning

NAMESPACE = "bert_jax.corpus"


def _read(indexed_source, validation_fraction: float):
  """(in validation, key, example) of one source's documents."""
  s, source = indexed_source
  stats = text_cleaning.Stats()
  for i, sentences in enumerate(corpora.read_source(source, stats)):
    text = documents_builder.document_text(sentences)
    in_validation = documents_builder.assign_split(text, validation_fraction, stats)
    yield in_validation, corpora.document_key(s, i), {"text": text}
  beam_util.count(NAMESPACE, stats)


def _read_group(group, *args):
  for indexed_source in group:
    yield from _read(indexed_source, *args)


def _groups(indexed_sources: list) -> list[list]:
  """What one worker reads at once: one source; but the ranges of a tfds dataset on an
  object store grouped by the file they start in (beam_remote.by_file), so that each
  file is downloaded about once."""
  in_store = lambda source: source[0] == "tfds" and paths.is_remote(source[4] or "")
  remote = [t for t in indexed_sources if in_store(t[1])]
  rest = [[t] for t in indexed_sources if not in_store(t[1])]
  if not remote:
    return rest
  _, name, _, split, data_dir, *_ = remote[0][1]
  dataset_dir = os.fspath(tfds.builder(name, data_dir=data_dir).data_path)
  return beam_remote.by_file(dataset_dir, split, remote, lambda t: t[1][6]) + rest


class BeamDocumentsBuilder(beam_remote.UploadingBuilder, documents_builder.DocumentsBuilder,
                           skip_registration=True):
  """documents_builder.DocumentsBuilder's dataset, built by a Beam pipeline (download_and_prepare
  with a tfds.download.DownloadConfig naming the runner)."""

  def __init__(self, *, sources: list, validation_fraction: float,
               splits=("train", "validation"), **kwargs):
    self._sources = list(sources)
    super().__init__(documents_fn=None, validation_fraction=validation_fraction,
                     splits=splits, **kwargs)

  def _split_generators(self, dl_manager, pipeline):
    """Each split's (key, example) PCollection, from one read of the corpus (tfds hands
    a builder whose _split_generators takes `pipeline` the split writers' pipeline)."""
    del dl_manager  # local or already downloaded sources
    import apache_beam as beam  # pylint: disable=g-import-not-at-top
    documents = (pipeline
                 | "Sources" >> beam.Create(_groups(list(enumerate(self._sources))))
                 | "Spread" >> beam.Reshuffle()
                 | "Read" >> beam.FlatMap(_read_group, self._validation_fraction))
    by_split = documents | "BySplit" >> beam.Partition(lambda d, _: int(d[0]), 2)
    return {split: by_split[int(split == "validation")] | f"Keyed_{split}" >> beam.Map(
        lambda d: d[1:]) for split in self._splits}

  def _process_pipeline_result(self, pipeline_result):
    self.stats.clear()
    self.stats.update(beam_util.counters(pipeline_result, NAMESPACE))
