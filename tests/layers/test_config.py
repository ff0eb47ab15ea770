"""TransformerConfig: flops_per_token against the PaLM paper's count (appendix B); older
checkpoints' model configs."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from bert_jax.layers.config import TransformerConfig
from bert_jax.models.bert import BertModel


@pytest.mark.parametrize("kw", [dict(), dict(head_dim=8, mlp_dim=48, num_heads=3)])
def test_flops_per_token_is_palm_6n_plus_12lhqt_over_three(kw):
  """Training FLOPs per token = 6 N + 12 L H Q T (PaLM, Chowdhery et al. 2022, app. B),
  N = the layer stack's matmul weights, counted from the real param tree."""
  cfg = TransformerConfig(**{"vocab_size": 50, "hidden_size": 32, "num_layers": 3,
                             "num_heads": 4, "mlp_dim": 64, "max_len": 64, **kw})
  ids = jnp.zeros((1, 8), jnp.int32)
  params = nn.unbox(jax.eval_shape(
      lambda: BertModel(cfg, add_pooler=False).init(jax.random.key(0), ids)))["params"]
  leaves = jax.tree_util.tree_leaves_with_path(params["encoder"])
  n = sum(x.size for p, x in leaves if "kernel" in jax.tree_util.keystr(p))
  for seq_len in (8, 128):
    want = 6 * n + 12 * cfg.num_layers * cfg.num_heads * cfg.d_head * seq_len
    assert 3 * cfg.flops_per_token(seq_len) == want


@pytest.mark.parametrize("field, value, expected", [
    ("num_layers", -1, "TransformerConfig.num_layers=-1; expected an integer >= 1."),
    ("num_layers", 0, "TransformerConfig.num_layers=0; expected an integer >= 1."),
    ("hidden_size", 0, "TransformerConfig.hidden_size=0; expected an integer >= 1."),
    ("num_heads", 0, "TransformerConfig.num_heads=0; expected an integer >= 1."),
    ("num_decoder_layers", -2,
     "TransformerConfig.num_decoder_layers=-2; expected an integer >= 0."),
    ("mlp_dim", 0, "TransformerConfig.mlp_dim=0; expected an integer >= 1."),
    ("init", "xavir", "TransformerConfig.init='xavir'; expected one of ('bert', 'xavier')."),
    ("dtype", "bf16", "TransformerConfig.dtype='bf16'; expected a float dtype name: float32, "
                      "bfloat16 or float16."),
    ("param_dtype", "int32", "TransformerConfig.param_dtype='int32'; expected a float dtype "
                             "name: float32, bfloat16 or float16."),
])
def test_an_impossible_field_is_one_valueerror_naming_it(field, value, expected):
  """What `--config.model.<field>=<value>` reaches: before, num_layers=-1 trained an
  embedding-only model with a negative MFU, hidden_size=0 was a ZeroDivisionError, a
  dtype typo numpy's TypeError and an init typo silently BERT's initializer."""
  with pytest.raises(ValueError) as info:
    TransformerConfig(**{field: value})
  assert str(info.value) == expected


def test_valid_fields_pass():
  cfg = TransformerConfig(num_decoder_layers=0, type_vocab_size=0, init="xavier",
                          dtype="bfloat16", matmul_dtype="bfloat16", param_dtype=jnp.float32)
  assert cfg.compute_dtype == jnp.bfloat16 and cfg.params_dtype == jnp.float32


def test_an_older_checkpoints_model_config_still_reads():
  """A meta written before the block attention was removed holds attention_block."""
  saved = dataclasses.asdict(TransformerConfig(hidden_size=16, num_heads=2, num_layers=1))
  saved["attention_block"] = 64
  assert TransformerConfig.from_dict(saved) == TransformerConfig(hidden_size=16, num_heads=2,
                                                                 num_layers=1)
