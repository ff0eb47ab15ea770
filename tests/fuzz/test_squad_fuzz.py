"""Fuzzed SQuAD JSON files (tasks/finetune/squad/data.py)."""
import json

from hypothesis import example, given, strategies as st

from bert_jax.tasks.finetune.squad.data import read_squad_json
from bert_jax.tasks.finetune.squad.features import featurize_squad
from tests.fuzz.strategies import FUZZ, check_reader, file_bytes, json_values, write

KEYS = ("data", "paragraphs", "qas", "context", "question", "id", "answers", "text",
        "answer_start", "is_impossible", "title")


def _squad(qa):
  return {"data": [{"title": "t", "paragraphs": [{"context": "The cat sat.", "qas": [qa]}]}]}


# Well-formed skeletons with one fuzzed field, so the inner checks are reached too.
qa_records = st.fixed_dictionaries(
    {}, optional={k: json_values(KEYS) for k in ("id", "question", "answers",
                                                 "is_impossible")}).map(_squad)


@FUZZ
@given(content=st.one_of(file_bytes,
                         json_values(KEYS).map(lambda v: json.dumps(v).encode()),
                         qa_records.map(lambda v: json.dumps(v).encode())))
@example(content=json.dumps(_squad({"question": "q", "answers": 5})).encode())
@example(content=json.dumps(_squad({"question": "q", "answers": {"text": 1}})).encode())
@example(content=json.dumps(_squad(
    {"question": "q", "answers": [{"text": "cat", "answer_start": 10**9}]})).encode())
@example(content=b'[' * 100_000)
@example(content=b'{"data": ["\xff"]}')
def test_squad_json(tmp_path, tokenizer, content):
  path = write(tmp_path / "dev.json", content)
  result = check_reader(lambda: read_squad_json(path), path)
  if result is not None:
    for ex in result[0]:
      assert isinstance(ex.question, str) and isinstance(ex.context, str)
      assert all(isinstance(a.text, str) and isinstance(a.start, int) for a in ex.answers)
    for is_training in (True, False):  # training also aligns answers to windows
      features, log = featurize_squad(result[0], tokenizer, max_seq_length=32, doc_stride=8,
                                      max_query_length=8, is_training=is_training)
      assert set(features["example_index"].tolist()) <= set(range(len(result[0])))
      assert log.num_skipped <= len(result[0]), log
