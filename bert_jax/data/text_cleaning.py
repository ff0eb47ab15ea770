"""Raw corpus text -> sentences and documents, bad input counted.

What every corpus reader (corpora.py) does to its text: decode bytes (undecodable ones
replaced), truncate over-long lines, split paragraphs into sentences, and emit a
document unless it is empty. Each repair or skip is counted in a `Stats` so the
preparation summary can report it. Kept apart from the readers: the same cleaning
serves text files, wiki dumps, the Lee corpus and tfds examples alike.
"""
from __future__ import annotations

import collections
import re
from typing import Iterator

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


def decode_line(raw: bytes, stats: Stats, max_line_chars: int) -> str:
  """A line of a file as stripped text: bad UTF-8 replaced, over-long lines cut."""
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


def paragraphs_to_sentences(paragraphs, stats: Stats, max_line_chars: int) -> list[str]:
  """The sentences of a document's paragraphs (each cut to max_line_chars first)."""
  sentences = []
  for paragraph in paragraphs:
    paragraph = paragraph.strip()
    if len(paragraph) > max_line_chars:
      paragraph = paragraph[:max_line_chars]
      stats["truncated_lines"] += 1
    sentences.extend(split_sentences(paragraph))
  return sentences


def emit(sentences: list[str], stats: Stats) -> Iterator[list[str]]:
  """Yields the document unless it is empty; counts it either way."""
  if not sentences:
    stats["empty_documents"] += 1
    return
  stats["documents"] += 1
  stats["sentences"] += len(sentences)
  stats["one_sentence_documents"] += len(sentences) == 1
  yield sentences
