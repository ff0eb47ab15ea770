"""Fuzzed CSV / TSV / JSONL classification files (tasks/finetune/classification/data.py)."""
from hypothesis import example, given, strategies as st

from bert_jax.tasks.finetune.classification.data import read_classification_file
from bert_jax.tasks.finetune.classification.features import featurize_classification
from tests.fuzz.strategies import FUZZ, check_reader, file_bytes, jsonl_bytes, write

KEYS = ("sentence", "label", "question")


@FUZZ
@given(content=file_bytes, file_format=st.sampled_from(["csv", "tsv"]),
       header=st.booleans())
@example(content=b"sentence,label\n\xff\xfe bad,1\n", file_format="csv", header=True)
@example(content=b"sentence,label\n" + b"x" * 140_000 + b",1\n", file_format="csv",
         header=True)
@example(content=b'sentence,label\n"open quote,1\n', file_format="csv", header=True)
def test_csv_tsv(tmp_path, tokenizer, content, file_format, header):
  path = tmp_path / f"data.{file_format}"
  sep = b"," if file_format == "csv" else b"\t"
  write(path, (b"sentence" + sep + b"label\n" if header else b"") + content)
  result = check_reader(lambda: read_classification_file(path), path)
  if result is not None:
    for ex in result[0]:
      assert isinstance(ex.text_a, str) and ex.text_a.strip() and ex.label is not None
    check_featurized(result[0], tokenizer)


def check_featurized(examples, tokenizer):
  """The featurizer takes whatever the reader kept: kept + skipped = examples."""
  features, log = featurize_classification(examples, tokenizer, max_seq_length=16,
                                           label_list=["0", "1"])
  assert log.kept + log.num_skipped == len(examples), log
  assert features["input_ids"].shape == (log.kept, 16)


@FUZZ
@given(content=jsonl_bytes(KEYS), text_b=st.booleans())
@example(content=b'{"sentence": "ok", "label": 1}\n' + b"[" * 100_000, text_b=False)
@example(content=b'{"sentence": "ok", "label": ' + b"1" * 5000 + b"}", text_b=False)
@example(content=b'{"sentence": "\xff", "label": 1}', text_b=False)
@example(content=b'{"sentence": "ok", "label": [1]}', text_b=False)
@example(content=b'{"sentence": {"a": 1}, "label": 1}', text_b=False)
def test_jsonl(tmp_path, tokenizer, content, text_b):
  path = tmp_path / "data.jsonl"
  write(path, content)
  result = check_reader(
      lambda: read_classification_file(path, text_b_key="question" if text_b else None), path)
  if result is not None:
    for ex in result[0]:
      assert isinstance(ex.text_a, str) and ex.text_a.strip()
    check_featurized(result[0], tokenizer)
