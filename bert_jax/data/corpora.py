"""Corpora as documents of sentences, written by tfds builders as array_record.

A document is a list of sentences (str). Three sources, all streamed:
  * text files in google-research/bert's format (one sentence per line, a blank line
    between documents); a line holding a whole paragraph is sentence-split;
  * the embedded corpus, offline: the ~100-article English Wikipedia excerpt and the Lee
    news corpus (one document per line) that gensim ships in gensim/test/test_data;
  * any tfds text dataset by name (e.g. `wikipedia/20230601.en`, which needs the
    optional TensorFlow extra to prepare), one example a document, paragraphs on lines.

`DocumentsBuilder` writes them, split into train/validation by a hash of each document's
text (deterministic, order-free, duplicates land on the same side). Bad input never
crashes: undecodable bytes are replaced, over-long lines truncated, empty documents
skipped, each counted in `stats`.
"""
from __future__ import annotations

import bz2
import collections
import glob
import hashlib
import json
import multiprocessing
import os
import re
import tempfile
from typing import Callable, Iterator, Optional

import numpy as np
import tensorflow_datasets as tfds

from bert_jax import paths
from bert_jax.data import beam_remote
from bert_jax.data import instances

Stats = collections.Counter

# ---------------------------------------------------------------- sentence splitting
# A boundary: sentence punctuation, optional closing quotes/brackets, whitespace, then
# what can open a sentence (capital, digit, opening quote/bracket). Lowercase starts are
# not boundaries ("e.g. this"), nor periods after a known abbreviation or an initial
# ("Dr. Who", "J. Smith", "U.S. Army"). A regex splitter, not a model: good enough for
# NSP pairs, and documented so nobody expects Punkt.
_BOUNDARY = re.compile(r"""([.!?]+["'\u201d\u2019)\]]*)\s+(?=["'\u201c\u2018(\[]?[A-Z0-9])""")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt ft vs etc inc ltd co corp no nos fig gen gov sen rep "
    "rev hon col lt sgt capt cmdr adm approx dept est jan feb mar apr jun jul aug sep sept "
    "oct nov dec e.g i.e cf al op".split())
_INITIALISM = re.compile(r"^(?:[a-z]\.)*[a-z]$")  # "j", "u.s", "u.s.a"


def split_sentences(text: str) -> list[str]:
  """Splits a paragraph into sentences (see _BOUNDARY)."""
  out, start = [], 0
  for m in _BOUNDARY.finditer(text):
    if m.group(1)[0] == ".":
      words = text[start:m.start(1)].split()
      prev = words[-1].lower().lstrip("\"'(") if words else ""
      if prev in _ABBREVIATIONS or _INITIALISM.match(prev):
        continue
    out.append(text[start:m.end(1)].strip())
    start = m.end()
  out.append(text[start:].strip())
  return [s for s in out if s]


def _decode_line(raw: bytes, stats: Stats, max_line_chars: int) -> str:
  try:
    line = raw.decode("utf-8")
  except UnicodeDecodeError:
    line = raw.decode("utf-8", errors="replace")
    stats["non_utf8_lines"] += 1
  line = line.strip()
  if len(line) > max_line_chars:
    line = line[:max_line_chars]
    stats["truncated_lines"] += 1
  return line


def _paragraphs_to_sentences(paragraphs, stats: Stats, max_line_chars: int) -> list[str]:
  sentences = []
  for paragraph in paragraphs:
    paragraph = paragraph.strip()
    if len(paragraph) > max_line_chars:
      paragraph = paragraph[:max_line_chars]
      stats["truncated_lines"] += 1
    sentences.extend(split_sentences(paragraph))
  return sentences


def _emit(sentences: list[str], stats: Stats) -> Iterator[list[str]]:
  if not sentences:
    stats["empty_documents"] += 1
    return
  stats["documents"] += 1
  stats["sentences"] += len(sentences)
  stats["one_sentence_documents"] += len(sentences) == 1
  yield sentences


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


def text_file_documents(patterns: str, stats: Stats,
                        max_line_chars: int = 20000) -> Iterator[list[str]]:
  """Documents of google-research/bert-format text files, read line by line."""
  for path in expand_globs(patterns):
    yield from file_documents(path, stats, max_line_chars)


def file_documents(path: str, stats: Stats, max_line_chars: int = 20000) -> Iterator[list[str]]:
  """Documents of one google-research/bert-format text file."""
  stats["files"] += 1
  before = stats["documents"] + stats["empty_documents"]
  sentences = []
  with paths.resolve(path).open("rb") as f:  # local, or gs:// for workers without a mount
    for raw in f:
      stats["lines"] += 1
      line = _decode_line(raw, stats, max_line_chars)
      if line:
        sentences.extend(split_sentences(line))
      elif sentences:  # blank line: end of document
        yield from _emit(sentences, stats)
        sentences = []
  if sentences:
    yield from _emit(sentences, stats)
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


def wiki_dump_documents(path: str, stats: Stats,
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
      yield from _emit(_paragraphs_to_sentences(paragraphs, stats, max_line_chars), stats)


def lee_documents(path: str, stats: Stats, max_line_chars: int = 20000) -> Iterator[list[str]]:
  """The Lee corpus: one news story a line."""
  with open(path, "rb") as f:
    for raw in f:
      stats["lines"] += 1
      yield from _emit(split_sentences(_decode_line(raw, stats, max_line_chars)), stats)


def embedded_documents(stats: Stats, max_line_chars: int = 20000) -> Iterator[list[str]]:
  yield from wiki_dump_documents(gensim_test_data(WIKI_EXCERPT), stats, max_line_chars)
  yield from lee_documents(gensim_test_data(LEE_CORPUS), stats, max_line_chars)


def tfds_documents(name: str, stats: Stats, text_key: str = "text", split: str = "train",
                   data_dir: Optional[str] = None, max_line_chars: int = 20000,
                   start: int = 0, stop: Optional[int] = None) -> Iterator[list[str]]:
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
    yield from _emit(_paragraphs_to_sentences(text.splitlines(), stats, max_line_chars), stats)


def prepare_tfds(name: str, data_dir: Optional[str] = None, split: str = "train",
                 download_config=None) -> int:
  """Prepares a catalog dataset as array_record (through its Beam pipeline when it is a
  Beam builder: wikipedia/*, c4/*; download_config carries the runner); its length."""
  builder = tfds.builder(name, data_dir=data_dir)
  if paths.is_remote(builder.data_dir):
    # Its Beam workers write the shards through a local file too (data/beam_remote.py):
    # array_record writes local files only. tfds's hook for a custom storage, per instance.
    builder._example_writer = lambda: beam_remote.UploadingExampleWriter(  # pylint: disable=protected-access
        file_format=builder.info.file_format)
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


def read_source(source: tuple, stats: Stats) -> Iterator[list[str]]:
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


def keyed_documents(corpus_sources, stats: Stats) -> Iterator[tuple[str, list[str]]]:
  """(key, sentences) of every document of the sources, in order."""
  for s, source in enumerate(corpus_sources):
    for i, sentences in enumerate(read_source(source, stats)):
      yield document_key(s, i), sentences


def document_text(sentences: list[str]) -> str:
  """A document as stored: its sentences on lines."""
  return "\n".join(s.replace("\n", " ") for s in sentences)


# ------------------------------------------------------------------------- builder
def is_validation(text: str, fraction: float) -> bool:
  """Deterministic document split: a 64-bit hash of the text against the fraction."""
  digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
  return int.from_bytes(digest, "little") < fraction * 2.0**64


def assign_split(text: str, fraction: float, stats: Stats) -> bool:
  """is_validation, counted: documents and characters per split (the vocabulary's
  sample size comes from train_characters)."""
  in_validation = is_validation(text, fraction)
  split = "validation" if in_validation else "train"
  stats[split + "_documents"] += 1
  stats[split + "_characters"] += len(text)
  return in_validation


def shard_bounds(num_documents: int, shard_documents: int) -> list[tuple[int, int]]:
  """[lo, hi) document ranges of the instance shards: about shard_documents each."""
  bounds = np.linspace(0, num_documents,
                       max(1, -(-num_documents // shard_documents)) + 1).astype(int)
  return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


def shard_texts(source, lo: int, hi: int) -> list[str]:
  """Texts of documents [lo, hi) of a documents split's data source."""
  docs = source.__getitems__(list(range(lo, hi))) if hi > lo else []
  return [d["text"].decode("utf-8") if isinstance(d["text"], bytes) else d["text"]
          for d in docs]


class _LocalBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """A builder of local data: no downloads, so no checksums file to locate."""

  VERSION = tfds.core.Version("1.0.0")

  # tfds finds a builder's checksums beside its code via importlib resources, which for
  # a package outside tensorflow_datasets needs the `importlib_resources` backport (not
  # a dependency of ours). Nothing here is downloaded: there is no checksums file.
  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls):
    return None


class DocumentsBuilder(_LocalBuilder, skip_registration=True):
  """Documents (sentences joined by newlines) in a train and a validation split.

  The corpus is read once: the train pass writes the validation documents to a spill
  file (one JSON string a line, on disk so memory stays bounded) that the validation
  pass replays. Stats are those of the full read.
  """

  def __init__(self, *, documents_fn: Callable[[Stats], Iterator[tuple[str, list[str]]]],
               validation_fraction: float, splits=("train", "validation"),
               spill_dir: Optional[str] = None, **kwargs):
    """Args:
      documents_fn: stats -> iterator of (key, document) (streamed), keyed_documents.
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
    self.stats = Stats()
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
    stats = Stats()
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


def _bounded_ordered_map(fn, tasks, processes: int, initializer, initargs):
  """Ordered map over a lazy task stream with at most 2 * processes shards in flight.

  Pool.imap would read the whole task stream (the corpus) ahead; this keeps memory
  bounded by a few shards. Workers are spawned, not forked: the parent may hold JAX
  and tokenizers thread pools, which do not survive a fork.
  """
  if processes <= 1:
    initializer(*initargs)
    yield from map(fn, tasks)
    return
  ctx = multiprocessing.get_context("spawn")
  with ctx.Pool(processes, initializer, initargs) as pool:
    pending = collections.deque()
    for task in tasks:
      pending.append(pool.apply_async(fn, (task,)))
      if len(pending) >= 2 * processes:
        yield pending.popleft().get()
    while pending:
      yield pending.popleft().get()


def shard_examples(shard: instances.ShardInstances, stats: Stats):
  """(key, example) of a shard's instances; counts instances and random B's."""
  offsets = np.concatenate([[0], np.cumsum(shard.lengths)])
  for j in range(len(shard.lengths)):
    lo, hi = offsets[j], offsets[j + 1]
    stats["instances"] += 1
    stats["random_next"] += int(shard.is_random_next[j])
    yield f"{shard.shard_index}-{j}", {
        "input_ids": shard.input_ids[lo:hi],
        "segment_ids": shard.segment_ids[lo:hi],
        "is_random_next": shard.is_random_next[j],
        "num_tokens": hi - lo,
    }


def instance_features() -> tfds.features.FeaturesDict:
  """The features of an instances dataset (both paths' writers encode with them)."""
  ids = lambda: tfds.features.Tensor(shape=(None,), dtype=np.int32,
                                     encoding=tfds.features.Encoding.BYTES)
  return tfds.features.FeaturesDict({
      "input_ids": ids(),  # [n] [CLS] ... [SEP], unpadded
      "segment_ids": ids(),  # [n]
      "is_random_next": np.int32,
      "num_tokens": np.int32,
  })


class InstancesBuilder(_LocalBuilder, skip_registration=True):
  """Unmasked pretraining instances (NSP pairs or packed rows) of a DocumentsBuilder's output.

  Documents are read in shards of `shard_documents`, each tokenized and turned into
  instances by a worker process; the NSP random document is drawn from the same shard
  (as is common practice: memory stays bounded by a few shards whatever the corpus
  size). Examples are yielded one by one to tfds' writer. Masking happens at load time.
  """

  def __init__(self, *, documents_dir: str, tokenizer_json: str,
               settings: instances.InstanceSettings, processes: int = 1,
               shard_documents: int = 256, splits=("train", "validation"), **kwargs):
    self._splits = tuple(splits)
    self._documents_dir = documents_dir
    self._tokenizer_json = tokenizer_json
    self._settings = settings
    self._processes = processes
    self._shard_documents = shard_documents
    self.stats = {}
    self.unigram_counts = None  # [vocab] int64 of the train documents, after generation
    super().__init__(**kwargs)

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=instance_features(),
                                 description="Unmasked BERT pretraining instances.")

  def _split_generators(self, dl_manager):
    del dl_manager
    return {split: self._generate_examples(int(split != "train"), split)
            for split in self._splits}

  def _generate_examples(self, split_id: int, split: str):
    source = tfds.builder_from_directory(self._documents_dir).as_data_source(split=split)
    bounds = shard_bounds(len(source), self._shard_documents)
    tasks = ((split_id, s, shard_texts(source, lo, hi)) for s, (lo, hi) in enumerate(bounds))

    stats = collections.Counter()
    counts = None
    processes = min(self._processes, len(bounds))  # no idle workers
    initargs = (self._tokenizer_json, self._settings, processes <= 1)
    for shard in _bounded_ordered_map(instances.shard_instances, tasks, processes,
                                      instances.init_worker, initargs):
      stats.update(shard.stats)
      if shard.unigram_counts is not None:
        counts = shard.unigram_counts if counts is None else counts + shard.unigram_counts
      yield from shard_examples(shard, stats)
    self.stats[split] = dict(stats)
    if split_id == 0:
      self.unigram_counts = counts
