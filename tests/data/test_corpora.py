"""Corpus readers on small files, the embedded corpus and tfds; bad input is counted."""
import collections
import itertools

import numpy as np
import pytest
import tensorflow_datasets as tfds

from bert_jax.data import corpora
from bert_jax.data import documents_builder


def test_text_files_google_format_and_paragraphs(testdata):
  stats = collections.Counter()
  docs = list(corpora.text_file_documents(
      testdata("tiny_corpus.txt") + "," + testdata("paragraphs.txt"), stats))
  assert [len(d) for d in docs] == [6, 7, 1, 7, 6, 5, 6, 4]
  assert docs[2] == ["A short note with only one sentence."]
  assert docs[6][:2] == ["Dr. Smith arrived in the U.S. Army camp at noon.",
                         "He was tired after the long drive!"]
  assert stats["documents"] == 8 and stats["sentences"] == 42
  assert stats["one_sentence_documents"] == 1 and stats["files"] == 2


def test_bad_input_is_counted_not_fatal(testdata):
  stats = collections.Counter()
  docs = list(corpora.text_file_documents(
      ",".join(testdata(n) for n in ("bad_bytes.txt", "empty.txt", "paragraphs.txt")),
      stats, max_line_chars=60))
  assert docs[0] == ["A line with invalid bytes \ufffd\ufffd here.", "Another good line follows."]
  assert docs[1][0] == "Second document \ufffd( broken."
  assert stats["non_utf8_lines"] == 2
  assert stats["empty_files"] == 1
  assert stats["truncated_lines"] == 2  # both paragraph lines exceed 60 characters
  assert all(len(s) <= 60 for d in docs for s in d)


def test_missing_corpus_path_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="nothing_here"):
    list(corpora.text_file_documents(str(tmp_path / "nothing_here*.txt"), collections.Counter()))


def test_embedded_wiki_markup_is_stripped():
  stats = collections.Counter()
  path = corpora.gensim_test_data(corpora.WIKI_EXCERPT)
  docs = list(itertools.islice(corpora.wiki_dump_documents(path, stats), 2))
  assert docs[0][0] == ("Anarchism is a political philosophy that advocates self-governed "
                        "societies based on voluntary institutions.")
  assert min(len(d) for d in docs) > 100  # whole articles, one document each
  text = " ".join(s for d in docs for s in d)
  for markup in ("[[", "]]", "{{", "}}", "''", "==", "<ref", "|thumb"):
    assert markup not in text
  assert stats["skipped_pages"] > 0  # redirects before the articles


def test_lee_corpus_one_document_a_line():
  stats = collections.Counter()
  docs = list(corpora.lee_documents(corpora.gensim_test_data(corpora.LEE_CORPUS), stats))
  assert len(docs) == stats["lines"] == 300
  assert docs[0][1] == ("A new blaze near Goulburn, south-west of Sydney, has forced the "
                        "closure of the Hume Highway.")


class FakeTextCorpus(documents_builder.LocalBuilder):
  """A registered tfds text dataset, to exercise the by-name path offline."""

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
        {"content": tfds.features.Text(), "id": np.int32}))

  def _split_generators(self, dl_manager):
    return {"train": self._generate_examples()}

  def _generate_examples(self):
    yield 0, {"content": "First para. Second sentence here.\nNew paragraph.", "id": 0}
    yield 1, {"content": "", "id": 1}
    yield 2, {"content": "Only one.", "id": 2}


def test_tfds_dataset_by_name(tmp_path):
  stats = collections.Counter()
  docs = list(corpora.tfds_documents("fake_text_corpus", stats, text_key="content",
                                     data_dir=str(tmp_path)))
  assert docs == [["First para.", "Second sentence here.", "New paragraph."], ["Only one."]]
  assert stats["empty_documents"] == 1
  with pytest.raises(KeyError, match="no feature 'text'"):
    list(corpora.tfds_documents("fake_text_corpus", stats, data_dir=str(tmp_path)))


def test_tfds_dataset_by_name_under_mock_data():
  examples = [{"content": b"Mocked text. Two sentences."}, {"content": "Another one."}]
  with tfds.testing.mock_data(num_examples=2, as_data_source_fn=lambda *a, **k: examples):
    docs = list(corpora.tfds_documents("fake_text_corpus", collections.Counter(),
                                       text_key="content"))
  assert docs == [["Mocked text.", "Two sentences."], ["Another one."]]
