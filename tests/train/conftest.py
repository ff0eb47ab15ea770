"""Shared tiny pretraining setup for the training-system tests."""
import ml_collections
import numpy as np
import pytest

from bert_jax.train.defaults import base_config, train_config


def tiny_config(**train_overrides) -> ml_collections.ConfigDict:
  c = base_config("bert_pretraining")
  c.model = ml_collections.ConfigDict(dict(
      variant="bert/tiny", vocab_size=64, hidden_size=32, num_heads=4, mlp_dim=64,
      max_len=16, dropout_rate=0.0, attention_dropout_rate=0.0))
  c.data = ml_collections.ConfigDict(dict(mode="nsp", max_seq_length=16,
                                          max_predictions_per_seq=4))
  c.train = train_config(batch_size=16, num_steps=10, learning_rate=1e-3, warmup_steps=2)
  c.train.update(train_overrides)
  return c


def random_batch(seed: int, batch: int = 16, length: int = 16, preds: int = 4, vocab: int = 64):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(6, length + 1, size=batch)
  mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
  ids = rng.integers(5, vocab, size=(batch, length)).astype(np.int32) * mask
  seg = ((np.arange(length)[None] >= lengths[:, None] // 2) & (mask == 1)).astype(np.int32)
  pos = np.stack([rng.choice(np.arange(1, l), size=preds, replace=False) for l in lengths])
  weights = (rng.random((batch, preds)) < 0.8).astype(np.float32)
  return dict(input_ids=ids, input_mask=mask, segment_ids=seg,
              masked_lm_positions=pos.astype(np.int32),
              masked_lm_ids=rng.integers(5, vocab, size=(batch, preds)).astype(np.int32),
              masked_lm_weights=weights,
              next_sentence_labels=rng.integers(0, 2, size=batch).astype(np.int32))


@pytest.fixture
def config():
  return tiny_config()
