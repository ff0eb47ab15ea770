"""The one table of named model sizes (big_vision's `decode_variant` idea).

`get_model_config("bert/base")`, `get_model_config("transformer/big", dropout_rate=0.3)`.
BERT sizes are Google's (Devlin et al. 2019; Turc et al. 2019 for the miniatures), the
Transformer sizes are Vaswani et al. (2017) Table 3, GPT sizes are GPT-2's, ModernBERT's
(Warner et al. 2024) those of answerdotai/ModernBERT-{base,large}'s config.json.
"""
from __future__ import annotations

from bert_jax.layers.config import TransformerConfig

_BERT = dict(vocab_size=30522, max_len=512, type_vocab_size=2, activation="gelu",
             layer_norm_eps=1e-12, position="learned", init="bert")
_TRANSFORMER = dict(vocab_size=37000, max_len=512, type_vocab_size=0, activation="relu",
                    layer_norm_eps=1e-6, position="sinusoidal", init="xavier",
                    scale_embeddings=True, attention_dropout_rate=0.0)
_GPT = dict(vocab_size=50257, max_len=1024, type_vocab_size=0, activation="gelu_tanh",
            layer_norm_eps=1e-5, position="learned", init="bert", pre_ln=True)
# transformers' ModernBertConfig defaults: no biases but the decoder's, no dropout, GELU,
# global attention every 3rd layer (theta 160k), the others a 128-token window (theta 10k).
_MODERNBERT = dict(family="modernbert", vocab_size=50368, max_len=8192, type_vocab_size=0,
                   activation="gelu", layer_norm_eps=1e-5, position="rotary",
                   rotary_base=160000.0, local_rotary_base=10000.0, local_window=128,
                   global_every=3, pre_ln=True, use_bias=False, norm_bias=False,
                   head_bias=False, decoder_bias=True, dropout_rate=0.0,
                   attention_dropout_rate=0.0, init="bert", init_std=0.02)

# name -> TransformerConfig fields (family defaults + size)
VARIANTS: dict[str, dict] = {
    "bert/tiny": dict(_BERT, num_layers=2, hidden_size=128, num_heads=2, mlp_dim=512),
    "bert/mini": dict(_BERT, num_layers=4, hidden_size=256, num_heads=4, mlp_dim=1024),
    "bert/small": dict(_BERT, num_layers=4, hidden_size=512, num_heads=8, mlp_dim=2048),
    "bert/medium": dict(_BERT, num_layers=8, hidden_size=512, num_heads=8, mlp_dim=2048),
    "bert/base": dict(_BERT, num_layers=12, hidden_size=768, num_heads=12, mlp_dim=3072),
    "bert/large": dict(_BERT, num_layers=24, hidden_size=1024, num_heads=16, mlp_dim=4096),
    "transformer/base": dict(_TRANSFORMER, num_layers=6, num_decoder_layers=6, hidden_size=512,
                             num_heads=8, mlp_dim=2048, dropout_rate=0.1),
    "transformer/big": dict(_TRANSFORMER, num_layers=6, num_decoder_layers=6, hidden_size=1024,
                            num_heads=16, mlp_dim=4096, dropout_rate=0.3),
    # tiny: the CPU demo's size, one global and two local layers.
    "modernbert/tiny": dict(_MODERNBERT, num_layers=3, hidden_size=128, num_heads=2,
                            mlp_dim=384),
    "modernbert/base": dict(_MODERNBERT, num_layers=22, hidden_size=768, num_heads=12,
                            mlp_dim=1152),
    "modernbert/large": dict(_MODERNBERT, num_layers=28, hidden_size=1024, num_heads=16,
                             mlp_dim=2624),
    "gpt/small": dict(_GPT, num_layers=12, hidden_size=768, num_heads=12, mlp_dim=3072),
    "gpt/medium": dict(_GPT, num_layers=24, hidden_size=1024, num_heads=16, mlp_dim=4096),
}


def get_model_config(name: str, **overrides) -> TransformerConfig:
  """The TransformerConfig of a named variant, with field overrides."""
  if name not in VARIANTS:
    raise KeyError(f"unknown model variant {name!r}; known: {sorted(VARIANTS)}")
  fields = dict(VARIANTS[name])
  unknown = set(overrides) - set(TransformerConfig.__dataclass_fields__)
  if unknown:
    raise KeyError(f"unknown model config field(s) {sorted(unknown)} for variant {name!r}")
  fields.update(overrides)
  return TransformerConfig(**fields)
