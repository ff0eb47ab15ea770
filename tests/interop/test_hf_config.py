"""config.json <-> TransformerConfig (tests/testdata/hf/tiny_bert, saved by transformers)."""
import json
import os

import pytest

from bert_jax.interop import hf_config
from tests.interop.hf_cases import TINY


def test_config_maps_every_field():
  cfg = hf_config.load_hf_config(TINY)
  assert (cfg.vocab_size, cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.d_head,
          cfg.d_mlp, cfg.max_len, cfg.type_vocab_size) == (122, 32, 2, 4, 8, 37, 64, 2)
  assert (cfg.activation, cfg.layer_norm_eps, cfg.dropout_rate,
          cfg.attention_dropout_rate) == ("gelu", 1e-12, 0.1, 0.1)
  assert cfg.position == "learned" and not cfg.pre_ln


@pytest.mark.parametrize("act,ours", [("gelu_new", "gelu_tanh"), ("relu", "relu"),
                                      ("gelu_pytorch_tanh", "gelu_tanh")])
def test_config_activations(tmp_path, act, ours):
  with open(os.path.join(TINY, "config.json")) as f:
    config = dict(json.load(f), hidden_act=act, hidden_dropout_prob=0.3)
  (tmp_path / "config.json").write_text(json.dumps(config))
  cfg = hf_config.load_hf_config(str(tmp_path))
  assert cfg.activation == ours and cfg.dropout_rate == 0.3


@pytest.mark.parametrize("field,value,needle", [
    ("position_embedding_type", "relative_key", "position_embedding_type 'relative_key'"),
    ("hidden_act", "silu", "hidden_act 'silu'"),
    ("model_type", "roberta", "model_type 'roberta'")])
def test_config_rejects_what_we_cannot_run(tmp_path, field, value, needle):
  with open(os.path.join(TINY, "config.json")) as f:
    config = dict(json.load(f), **{field: value})
  (tmp_path / "config.json").write_text(json.dumps(config))
  with pytest.raises(ValueError, match=needle):
    hf_config.load_hf_config(str(tmp_path))
