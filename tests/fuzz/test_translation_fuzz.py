"""Fuzzed translation TSV and aligned files (tasks/translation/data.py)."""
from hypothesis import example, given, strategies as st

from bert_jax.tasks.translation import data
from tests.fuzz.strategies import FUZZ, check_reader, file_bytes, write


@FUZZ
@given(content=file_bytes)
@example(content=b"Hallo\tHello\n\xff\tbad\n\n\t\n")
def test_tsv(tmp_path, content):
  path = write(tmp_path / "train.tsv", content)
  result = check_reader(lambda: data.read_file_split(path), path)
  if result is not None:
    for pair in result[0]:
      assert pair.source.strip() and pair.target.strip()


@FUZZ
@given(source=file_bytes, target=file_bytes)
@example(source=b"eins\n\xff\n", target=b"one\ntwo\n")
def test_aligned(tmp_path, source, target):
  src, tgt = write(tmp_path / "train.de", source), write(tmp_path / "train.en", target)
  result = check_reader(lambda: data.read_file_split(f"{src},{tgt}"), src, tgt)
  if result is not None:
    for pair in result[0]:
      assert pair.source.strip() and pair.target.strip()


def test_missing_file_is_named(tmp_path):
  missing = str(tmp_path / "absent.tsv")
  assert check_reader(lambda: data.read_file_split(missing), missing) is None
