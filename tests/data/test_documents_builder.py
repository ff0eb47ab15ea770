"""The documents level (data/documents_builder.py): the hash split, array_record output."""
import collections

import numpy as np

from bert_jax.data import corpora
from bert_jax.data import documents_builder


def test_hash_split_is_deterministic_with_the_fraction():
  texts = [f"document number {i}" for i in range(20_000)]
  flags = np.array([documents_builder.is_validation(t, 0.1) for t in texts])
  assert abs(flags.mean() - 0.1) < 0.01
  assert (flags == [documents_builder.is_validation(t, 0.1) for t in texts]).all()
  assert not any(documents_builder.is_validation(t, 0.0) for t in texts[:100])


def test_documents_builder_writes_array_record(tmp_path, testdata):
  files = testdata("tiny_corpus.txt") + "," + testdata("paragraphs.txt")
  builder = documents_builder.DocumentsBuilder(
      documents_fn=lambda stats: corpora.keyed_documents(
          [("text", f, 20000) for f in files.split(",")], stats),
      validation_fraction=0.25, data_dir=str(tmp_path), file_format="array_record")
  builder.download_and_prepare(download_dir=str(tmp_path / "dl"))
  assert sorted(p.name for p in builder.data_path.iterdir() if "array_record" in p.name) == [
      "documents_builder-train.array_record-00000-of-00001",
      "documents_builder-validation.array_record-00000-of-00001"]
  train = [d["text"].decode() for d in builder.as_data_source(split="train")]
  valid = [d["text"].decode() for d in builder.as_data_source(split="validation")]
  expected = ["\n".join(d) for d in corpora.text_file_documents(files, collections.Counter())]
  assert sorted(train + valid) == sorted(expected)
  assert all(documents_builder.is_validation(t, 0.25) for t in valid)
  assert not any(documents_builder.is_validation(t, 0.25) for t in train)
  assert builder.stats["train_documents"] == len(train) and len(train) >= 4
  assert builder.stats["sentences"] == 42
