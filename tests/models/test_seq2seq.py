"""models/seq2seq.py: logical axis names; KV-cache decoding equals the full forward pass."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.layers.config import TransformerConfig
from bert_jax.models.seq2seq import Transformer, shift_right
from bert_jax.models.variants import get_model_config
from tests.models.names import assert_every_param_named

TINY = TransformerConfig(vocab_size=40, hidden_size=16, num_layers=3, num_heads=4, mlp_dim=24,
                         max_len=16, deterministic=True, layer_norm_eps=1e-6)


@pytest.mark.parametrize("scan", [False, True])
def test_every_param_has_logical_axis_names(scan):
  cfg = get_model_config("transformer/base", scan_layers=scan, num_layers=2,
                         num_decoder_layers=2)
  ids = jnp.zeros((1, 8), jnp.int32)
  assert_every_param_named(
      jax.eval_shape(lambda: Transformer(cfg).init(jax.random.key(0), ids, ids))["params"])


def test_seq2seq_kv_cache_decoding_equals_full_sequence():
  cfg = TINY.replace(position="sinusoidal", num_decoder_layers=2, type_vocab_size=0,
                     scale_embeddings=True, init="xavier", activation="relu")
  src = jnp.array([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14]])
  tgt = jnp.array([[3, 4, 5, 6, 7], [8, 9, 10, 11, 12]])
  model = Transformer(cfg)
  params = nn.meta.unbox(model.init(jax.random.key(0), src, shift_right(tgt))["params"])
  full = model.apply({"params": params}, src, shift_right(tgt))
  decoder = Transformer(cfg.replace(decode=True))
  src_mask = src > 0
  encoded = decoder.apply({"params": params}, src, src_mask, method=Transformer.encode)
  inputs = shift_right(tgt)
  variables = jax.eval_shape(lambda: decoder.init(jax.random.key(0), src, inputs))
  cache = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), variables["cache"])
  for i in range(5):
    logits, mutated = decoder.apply(
        {"params": params, "cache": cache}, encoded, src_mask, inputs[:, i:i + 1],
        tgt_positions=jnp.full((2, 1), i), method=Transformer.decode, mutable=["cache"])
    cache = mutated["cache"]
    np.testing.assert_allclose(logits[:, 0], full[:, i], atol=1e-5)
