"""models/gpt.py: logical axis names; KV-cache decoding equals the full forward pass."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.layers.config import TransformerConfig
from bert_jax.models.gpt import GPT, init_cache
from bert_jax.models.variants import get_model_config
from tests.models.names import assert_every_param_named

TINY = TransformerConfig(vocab_size=40, hidden_size=16, num_layers=3, num_heads=4, mlp_dim=24,
                         max_len=16, deterministic=True, layer_norm_eps=1e-6)


@pytest.mark.parametrize("scan", [False, True])
def test_every_param_has_logical_axis_names(scan):
  cfg = get_model_config("gpt/small", scan_layers=scan, num_layers=2)
  ids = jnp.zeros((1, 8), jnp.int32)
  assert_every_param_named(jax.eval_shape(lambda: GPT(cfg).init(jax.random.key(0), ids))["params"])


@pytest.mark.parametrize("position,scan", [("learned", False), ("rotary", True),
                                           ("relative", False), ("relative", True),
                                           ("sinusoidal", False)])
def test_gpt_kv_cache_decoding_equals_full_sequence(position, scan):
  cfg = TINY.replace(position=position, scan_layers=scan, pre_ln=True, type_vocab_size=0)
  ids = jax.random.randint(jax.random.key(1), (2, 9), 0, 40)
  model = GPT(cfg)
  params = nn.meta.unbox(model.init(jax.random.key(0), ids)["params"])
  full = jax.jit(model.apply)({"params": params}, ids)          # [2, 9, vocab]
  decoder = GPT(cfg.replace(decode=True))
  cache = init_cache(decoder, 2, 9)
  step = jax.jit(lambda c, tok, pos: decoder.apply({"params": params, "cache": c}, tok,
                                                   positions=pos, mutable=["cache"]))
  for i in range(9):
    logits, mutated = step(cache, ids[:, i:i + 1], jnp.full((2, 1), i))
    cache = mutated["cache"]
    np.testing.assert_allclose(logits[:, 0], full[:, i], atol=1e-5)
