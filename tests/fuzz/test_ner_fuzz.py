"""Fuzzed CoNLL and JSONL NER files and unlabeled NER input (tasks/finetune/ner/data.py)."""
from hypothesis import example, given, strategies as st

from bert_jax.tasks.finetune.ner.data import (CONLL2003_NER_TAGS, read_conll_file,
                                              read_ner_input, read_ner_jsonl)
from bert_jax.tasks.finetune.ner.features import featurize_ner
from tests.fuzz.strategies import FUZZ, check_reader, file_bytes, jsonl_bytes, write

KEYS = ("tokens", "tags")


@FUZZ
@given(content=file_bytes, tag_column=st.sampled_from([-1, 1, 3]))
@example(content=b"EU B-ORG\n\xff O\n\nok O\n", tag_column=-1)
@example(content=b"EU B-ORG\n", tag_column=3)
def test_conll(tmp_path, tokenizer, content, tag_column):
  path = write(tmp_path / "train.conll", content)
  result = check_reader(lambda: read_conll_file(path, tag_column=tag_column), path)
  if result is not None:
    for ex in result[0]:
      assert ex.words and len(ex.words) == len(ex.tags)
      assert all(isinstance(w, str) and w for w in ex.words)
    check_featurized(result[0], tokenizer)


def check_featurized(examples, tokenizer, allow_unlabeled=False):
  """The featurizer takes whatever the reader kept: kept + skipped = examples."""
  features, log = featurize_ner(examples, tokenizer, max_seq_length=16,
                                label_list=CONLL2003_NER_TAGS,
                                allow_unlabeled=allow_unlabeled)
  assert log.kept + log.num_skipped == len(examples), log
  assert features["input_ids"].shape == (log.kept, 16)


@FUZZ
@given(content=jsonl_bytes(KEYS), with_labels=st.booleans())
@example(content=b'{"tokens": ["EU"], "tags": [true]}', with_labels=True)
@example(content=b'{"tokens": ["EU"], "tags": [9]}', with_labels=True)
@example(content=b'{"tokens": ["EU"], "tags": "B-ORG"}', with_labels=True)
def test_jsonl(tmp_path, tokenizer, content, with_labels):
  path = write(tmp_path / "train.jsonl", content)
  result = check_reader(lambda: read_ner_jsonl(
      path, label_list=CONLL2003_NER_TAGS if with_labels else None), path)
  if result is not None:
    for ex in result[0]:
      assert ex.words and all(isinstance(w, str) for w in ex.words)
      assert len(ex.tags) == len(ex.words) and all(isinstance(t, str) for t in ex.tags)
    check_featurized(result[0], tokenizer)


@FUZZ
@given(content=file_bytes, suffix=st.sampled_from([".txt", ".jsonl"]))
@example(content=b"EU rejects\n\xff\n", suffix=".txt")
def test_unlabeled_input(tmp_path, tokenizer, content, suffix):
  path = write(tmp_path / f"input{suffix}", content)
  result = check_reader(lambda: read_ner_input(path), path)
  if result is not None:
    for ex in result[0]:
      assert ex.words and ex.tags is None
    check_featurized(result[0], tokenizer, allow_unlabeled=True)
