"""Fuzzed pretraining text files (data/corpora.py text_file_documents)."""
import collections
import pathlib
import tempfile

import pytest
from hypothesis import example, given, strategies as st

from bert_jax.data import corpora
from tests.fuzz.strategies import FUZZ, file_bytes, write


@FUZZ
@given(contents=st.lists(file_bytes, min_size=1, max_size=3))
@example(contents=[b"\xff\xfe A sentence.\n\n\x00\n" + b"y" * 30_000 + b"\n"])
@example(contents=[b"", b"\n\n\n", b"\r\n"])
def test_text_files(tmp_path, contents):
  folder = pathlib.Path(tempfile.mkdtemp(dir=tmp_path))  # one per example: no leftovers
  for i, content in enumerate(contents):
    write(folder / f"part-{i}.txt", content)
  stats = collections.Counter()
  docs = list(corpora.text_file_documents(str(folder / "part-*.txt"), stats,
                                          max_line_chars=20000))
  # Every line read and counted; bad bytes and long lines counted, never fatal.
  assert stats["files"] == len(contents)
  assert stats["lines"] == sum(c.count(b"\n") + (c != b"" and not c.endswith(b"\n"))
                               for c in contents)
  assert stats["documents"] == len(docs)
  assert stats["sentences"] == sum(len(d) for d in docs)
  for doc in docs:
    assert doc and all(isinstance(s, str) and s and len(s) <= 20000 for s in doc)
  # The file is read in binary; a line is not UTF-8 when its decode fails.
  assert stats["non_utf8_lines"] == sum(
      _not_utf8(line) for c in contents for line in c.split(b"\n"))


def _not_utf8(line: bytes) -> bool:
  try:
    line.decode("utf-8")
    return False
  except UnicodeDecodeError:
    return True


def test_missing_corpus_names_the_pattern(tmp_path):
  pattern = str(tmp_path / "nothing-*.txt")
  with pytest.raises(FileNotFoundError, match="nothing-"):
    list(corpora.text_file_documents(pattern, collections.Counter()))
