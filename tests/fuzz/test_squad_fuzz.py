"""Fuzzed SQuAD JSON files (tasks/finetune/squad/data.py)."""
import json

from hypothesis import example, given, strategies as st

from bert_jax.tasks.finetune.squad.data import read_squad_json
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
def test_squad_json(tmp_path, content):
  path = write(tmp_path / "dev.json", content)
  result = check_reader(lambda: read_squad_json(path), path)
  if result is not None:
    for ex in result[0]:
      assert isinstance(ex.question, str) and isinstance(ex.context, str)
      assert all(isinstance(a.text, str) and isinstance(a.start, int) for a in ex.answers)
