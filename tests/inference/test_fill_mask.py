"""fill_mask against transformers' MLM logits (tests/testdata/hf/tiny_bert_outputs.npz),
and many texts batched by length against one at a time."""
import os

import numpy as np
import pytest

from bert_jax.inference import fill_mask
from bert_jax.inference import loader

HF = os.path.join(os.path.dirname(os.path.dirname(__file__)), "testdata", "hf")
TINY = os.path.join(HF, "tiny_bert")


@pytest.fixture(scope="module")
def tiny():
  return loader.load(TINY)


def _softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def test_probabilities_equal_transformers_prediction_logits(tiny):
  ref = np.load(os.path.join(HF, "tiny_bert_outputs.npz"))
  positions = np.array([[1, 4, 7], [0, 2, 5], [3, 6, 8]], np.int32)
  got = fill_mask.mask_probabilities(tiny.config, tiny.params, ref["input_ids"], positions,
                                     ref["attention_mask"], ref["token_type_ids"])
  want = _softmax(np.take_along_axis(ref["prediction_logits"], positions[..., None], axis=1))
  np.testing.assert_allclose(got, want, atol=1e-6)


def test_many_texts_in_buckets_equal_one_at_a_time_in_the_callers_order(tiny):
  """A shuffled mix of 4..62-token texts with 1..3 masks, batches of 2: the probabilities
  of each text equal those of a pass of it alone, unpadded (1e-5), in the given order.
  (Four texts: each reference pass is a compile of its own.)"""
  rng = np.random.default_rng(0)
  words = "the cat sat on a mat and then it ran to the big dog".split()
  texts = []
  for n in rng.permutation([2, 20, 33, 50]):
    body = [words[i % len(words)] for i in range(n)]
    for at in rng.choice(n, size=min(n, 1 + n % 3), replace=False):
      body[at] = "[MASK]"
    texts.append(" ".join(body))
  inputs = [fill_mask._masked_inputs(tiny, t) for t in texts]  # pylint: disable=protected-access
  lengths = [len(ids) for ids, _ in inputs]
  assert lengths != sorted(lengths) and sum(n <= 32 for n in lengths) == 2  # 2 buckets
  got = fill_mask.mask_probabilities_many(tiny.config, tiny.params, [x[0] for x in inputs],
                                          [x[1] for x in inputs], batch_size=2)
  for (ids, positions), probs in zip(inputs, got):
    want = fill_mask.mask_probabilities(tiny.config, tiny.params, [ids], [positions])[0]
    assert probs.shape == want.shape == (len(positions), tiny.config.vocab_size)
    np.testing.assert_allclose(probs, want, atol=1e-5, rtol=1e-5)
  many = fill_mask.fill_many(tiny, texts, 3, batch_size=2)
  assert [len(m) for m in many] == [len(p) for _, p in inputs]
  for masks, probs in zip(many, got):
    for candidates, row in zip(masks, probs):
      assert [t for t, _ in candidates] == [tiny.tokenizer.id_to_token(int(i))
                                            for i in np.argsort(-row, kind="stable")[:3]]
