"""Corpora as documents of sentences: the readers, and a corpus as a list of sources.

A document is a list of sentences (str). Three sources, all streamed:
  * text files in google-research/bert's format (one sentence per line, a blank line
    between documents); a line holding a whole paragraph is sentence-split;
  * the embedded corpus, offline: the ~100-article English Wikipedia excerpt and the Lee
    news corpus (one document per line) that gensim ships in gensim/test/test_data;
  * any tfds text dataset by name (e.g. `wikipedia/20230601.en`, which needs the
    optional TensorFlow extra to prepare), one example a document, paragraphs on lines.

Bad input never crashes: undecodable bytes are replaced, over-long lines truncated,
empty documents skipped, each counted in `stats` (the cleaning is text_cleaning.py).
documents_builder.py writes the documents read here as a tfds dataset; the Beam stage
(beam_documents.py) reads the same sources on its workers.
"""
from __future__ import annotations

import bz2
import glob
import importlib.util
import os
import re
from typing import Iterator, Optional

import tensorflow_datasets as tfds

from bert_jax.runtime import paths
from bert_jax.data.beam import remote as beam_remote
from bert_jax.data.beam import util as beam_util
from bert_jax.data import text_cleaning

# ------------------------------------------------------------------------- readers
def _glob(pattern: str) -> list[str]:
  """Files matching a glob, local or on an object store (gs://B/books/*.txt)."""
  if not paths.is_remote(pattern):
    return sorted(glob.glob(os.path.expanduser(pattern)))
  import fsspec  # pylint: disable=g-import-not-at-top
  fs, _ = fsspec.core.url_to_fs(pattern)
  scheme = pattern.split("://", 1)[0]
  return sorted(f"{scheme}://{p}" for p in fs.glob(pattern) if fs.isfile(p))


def file_identity(path: str) -> tuple:
  """(path, size, version) of a corpus file, for the corpus hash: mtime locally, the
  object's generation on gs://."""
  if not paths.is_remote(path):
    return path, os.path.getsize(path), os.path.getmtime(path)
  import fsspec  # pylint: disable=g-import-not-at-top
  fs, rel = fsspec.core.url_to_fs(path)
  info = fs.info(rel)
  return path, int(info["size"]), str(info.get("generation") or info.get("mtime") or "")


def expand_globs(patterns: str) -> list[str]:
  """Comma-separated globs -> sorted file list; a pattern matching nothing is an error."""
  files = []
  for pattern in [p.strip() for p in patterns.split(",") if p.strip()]:
    matched = _glob(pattern)
    if not matched:
      raise FileNotFoundError(f"Corpus path {pattern!r} matches no file.")
    files.extend(matched)
  if not files:
    raise ValueError("No corpus file given (config.text_files is empty).")
  return files


def text_file_documents(patterns: str, stats: text_cleaning.Stats,
                        max_line_chars: int = 20000) -> Iterator[list[str]]:
  """Documents of google-research/bert-format text files, read line by line."""
  for path in expand_globs(patterns):
    yield from file_documents(path, stats, max_line_chars)


def file_documents(path: str, stats: text_cleaning.Stats,
                   max_line_chars: int = 20000) -> Iterator[list[str]]:
  """Documents of one google-research/bert-format text file."""
  stats["files"] += 1
  before = stats["documents"] + stats["empty_documents"]
  sentences = []
  with paths.resolve(path).open("rb") as f:  # local, or gs:// for workers without a mount
    for raw in f:
      stats["lines"] += 1
      line = text_cleaning.decode_line(raw, stats, max_line_chars)
      if line:
        sentences.extend(text_cleaning.split_sentences(line))
      elif sentences:  # blank line: end of document
        yield from text_cleaning.emit(sentences, stats)
        sentences = []
  if sentences:
    yield from text_cleaning.emit(sentences, stats)
  if stats["documents"] + stats["empty_documents"] == before:
    stats["empty_files"] += 1


def gensim_test_data(name: str) -> str:
  from gensim.test.utils import datapath  # pylint: disable=g-import-not-at-top
  path = datapath(name)
  if not os.path.exists(path):
    raise FileNotFoundError(f"The embedded corpus file {path} is missing from gensim.")
  return path


WIKI_EXCERPT = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
LEE_CORPUS = "lee_background.cor"
_HEADING = re.compile(r"^=+.*=+$")
_BOLD_ITALIC = re.compile(r"'{2,}")
_BULLET = re.compile(r"^[*#:;|!\s]+")


def wiki_dump_documents(path: str, stats: text_cleaning.Stats,
                        max_line_chars: int = 20000) -> Iterator[list[str]]:
  """Articles of a MediaWiki XML dump (.bz2), markup stripped by gensim's wiki filter.

  One article is one document. Headings, and lines under 4 words once bullets are
  stripped (table cells, infobox debris), are dropped; each remaining line is a
  paragraph to sentence-split.
  """
  from gensim.corpora import wikicorpus  # pylint: disable=g-import-not-at-top
  with bz2.open(path, "rb") as f:
    for _, text, _ in wikicorpus.extract_pages(f, filter_namespaces=("0",)):
      if not text or text.lstrip().lower().startswith("#redirect"):
        stats["skipped_pages"] += 1
        continue
      plain = _BOLD_ITALIC.sub("", wikicorpus.filter_wiki(text))
      paragraphs = []
      for line in plain.splitlines():
        line = _BULLET.sub("", line).strip()
        if not _HEADING.match(line) and len(line.split()) >= 4:
          paragraphs.append(line)
      yield from text_cleaning.emit(
          text_cleaning.paragraphs_to_sentences(paragraphs, stats, max_line_chars), stats)


def lee_documents(path: str, stats: text_cleaning.Stats,
                  max_line_chars: int = 20000) -> Iterator[list[str]]:
  """The Lee corpus: one news story a line."""
  with open(path, "rb") as f:
    for raw in f:
      stats["lines"] += 1
      line = text_cleaning.decode_line(raw, stats, max_line_chars)
      yield from text_cleaning.emit(text_cleaning.split_sentences(line), stats)


def embedded_documents(stats: text_cleaning.Stats,
                       max_line_chars: int = 20000) -> Iterator[list[str]]:
  yield from wiki_dump_documents(gensim_test_data(WIKI_EXCERPT), stats, max_line_chars)
  yield from lee_documents(gensim_test_data(LEE_CORPUS), stats, max_line_chars)


def tfds_documents(name: str, stats: text_cleaning.Stats, text_key: str = "text",
                   split: str = "train", data_dir: Optional[str] = None,
                   max_line_chars: int = 20000, start: int = 0,
                   stop: Optional[int] = None) -> Iterator[list[str]]:
  """Documents of a tfds text dataset (one example each, examples [start, stop) of the
  split), via its array_record source (prepared first if it is not: a no-op else)."""
  builder = tfds.builder(name, data_dir=data_dir)
  builder.download_and_prepare(file_format="array_record")
  if paths.is_remote(builder.data_path):  # array_record reads local files only
    source = beam_remote.open_split(os.fspath(builder.data_path), split)
  else:
    source = builder.as_data_source(split=split)
  for i in range(start, len(source) if stop is None else min(stop, len(source))):
    example = source[i]
    if text_key not in example:
      raise KeyError(f"tfds dataset {name} has no feature {text_key!r} (config.tfds_text_key);"
                     f" it has {sorted(example)}.")
    text = example[text_key]
    if isinstance(text, bytes):
      try:
        text = text.decode("utf-8")
      except UnicodeDecodeError:
        text = text.decode("utf-8", errors="replace")
        stats["non_utf8_lines"] += 1
    yield from text_cleaning.emit(
        text_cleaning.paragraphs_to_sentences(text.splitlines(), stats, max_line_chars), stats)


def prepare_tfds(name: str, data_dir: Optional[str] = None, split: str = "train",
                 download_config=None) -> int:
  """Prepares a catalog dataset as array_record (through its Beam pipeline when it is a
  Beam builder: wikipedia/*, c4/*; download_config carries the runner); its length."""
  builder = tfds.builder(name, data_dir=data_dir)
  if paths.is_remote(builder.data_dir):
    # Its Beam workers write the shards through a local file too (data/beam/remote.py):
    # array_record writes local files only. tfds's hook for a custom storage, per instance.
    builder._example_writer = lambda: beam_remote.UploadingExampleWriter(  # pylint: disable=protected-access
        file_format=builder.info.file_format)
  if download_config is None and importlib.util.find_spec("apache_beam"):
    # In process too, a Beam builder runs on Beam's Python direct runner, never Prism
    # (tfds' default is Beam's DirectRunner, which would fetch Prism: BeamRun.beam_runner).
    download_config = beam_util.BeamRun("DirectRunner").download_config()
  builder.download_and_prepare(file_format="array_record", download_config=download_config)
  return builder.info.splits[split].num_examples


# ------------------------------------------------------------------- sources
# A corpus is a list of sources (plain tuples, so Beam can ship them to workers): one
# per text file, the two embedded files, or ranges of a tfds split. A document's key is
# (source index, index within the source): the same in process and on Beam, so both
# write the same records in the same order (tfds orders records by a hash of the key).
TFDS_RANGE = 4096  # documents of a tfds split per source


def sources(cfg, download_config=None) -> list[tuple]:
  """The sources of a data config's corpus. corpus=tfds prepares the dataset first
  (download_config: its Beam runner, for Beam builders), and adds config.text_files if
  set (Wikipedia + a directory of books, BERT's corpus)."""
  files = [("text", path, cfg.max_line_chars) for path in expand_globs(cfg.text_files)] if (
      cfg.corpus == "text" or cfg.text_files) else []
  if cfg.corpus == "text":
    return files
  if cfg.corpus == "tfds":
    n = prepare_tfds(cfg.tfds_name, cfg.tfds_data_dir, cfg.tfds_split, download_config)
    return [("tfds", cfg.tfds_name, cfg.tfds_text_key, cfg.tfds_split, cfg.tfds_data_dir,
             cfg.max_line_chars, lo, min(lo + TFDS_RANGE, n))
            for lo in range(0, n, TFDS_RANGE)] + files
  return [("wiki", gensim_test_data(WIKI_EXCERPT), cfg.max_line_chars),
          ("lee", gensim_test_data(LEE_CORPUS), cfg.max_line_chars)]


def read_source(source: tuple, stats: text_cleaning.Stats) -> Iterator[list[str]]:
  kind, *args = source
  if kind == "text":
    return file_documents(*args[:1], stats, *args[1:])
  if kind == "wiki":
    return wiki_dump_documents(args[0], stats, args[1])
  if kind == "lee":
    return lee_documents(args[0], stats, args[1])
  if kind == "tfds":
    name, text_key, split, data_dir, max_line_chars, start, stop = args
    return tfds_documents(name, stats, text_key, split, data_dir, max_line_chars, start, stop)
  raise ValueError(f"unknown corpus source {kind!r}")


def document_key(source_index: int, index: int) -> str:
  return f"{source_index:06d}-{index:09d}"


def keyed_documents(corpus_sources,
                    stats: text_cleaning.Stats) -> Iterator[tuple[str, list[str]]]:
  """(key, sentences) of every document of the sources, in order."""
  for s, source in enumerate(corpus_sources):
    for i, sentences in enumerate(read_source(source, stats)):
      yield document_key(s, i), sentences
