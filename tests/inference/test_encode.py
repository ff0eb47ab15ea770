"""Packed encoding: each text's vectors are those of a forward pass of it alone."""
import os

import numpy as np
import pytest

from bert_jax.inference import encode
from bert_jax.inference import passes

TINY = os.path.join(os.path.dirname(os.path.dirname(__file__)), "testdata", "hf", "tiny_bert")


@pytest.mark.parametrize("row_length", [96, 24])
def test_packed_rows_give_each_text_the_vectors_of_its_own_forward_pass(row_length,
                                                                        monkeypatch):
  from bert_jax.checkpoint.pretrained import load_encoder
  config, params, tokenizer = load_encoder(TINY)
  texts = ["the cat sat on the mat", "a dog", "bird", "the " * 25, "x", "a b c d e f"]
  ids = encode.tokenize(tokenizer, texts, 64).ids
  # batch_size 1: 64 tokens a pass, several texts in a row. Rows of 96 hold them all;
  # with rows of 24 the 27-token text is long: its row of 32 (bucketed by 8) also takes
  # the 4-token "a dog" (the only short text that fits its 5 free tokens).
  monkeypatch.setattr(passes, "ROW_LENGTH", row_length)
  monkeypatch.setattr(passes, "LENGTH_BUCKET", 8)
  plans = passes.plan_passes([len(x) for x in ids], 1)
  shared = [p for p in plans if np.bincount(p.row_of).max() > 1]
  assert shared and (row_length == 96 or [p.row_length for p in plans] == [24, 32])
  if row_length == 24:
    assert plans[1].texts.tolist() == [3, 1]
  packed = encode.run_model(config, params, ids, pooling="none", batch_size=1)
  for x, got in zip(ids, packed):
    alone = encode._forward({k: params[k] for k in ("embeddings", "encoder")}, x[None],
                           np.arange(len(x))[None], np.ones((1, len(x)), np.int32),
                           config=config.replace(deterministic=True), layers=(-1,),
                           combine="concat")[0]
    np.testing.assert_allclose(got, np.asarray(alone), atol=2e-6)
  means = encode.run_model(config, params, ids, pooling="mean", batch_size=1)
  cls = encode.run_model(config, params, ids, pooling="cls", batch_size=1)
  for p, m, c in zip(packed, means, cls):
    np.testing.assert_allclose(m, p.mean(0), atol=1e-6)
    np.testing.assert_array_equal(c, p[0])
