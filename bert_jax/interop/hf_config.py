"""Hugging Face BERT config.json <-> our TransformerConfig.

Reading validates what HF's BertConfig may hold but our BERT cannot run (relative
positions, a decoder, an unknown activation), each as one clear line; writing refuses a
model HF's BertConfig cannot express (pre-LN, rotary positions, ...). read_config_json is
shared with the GPT-2 interop.
"""
from __future__ import annotations

import json
import os

from bert_jax.runtime import paths
from bert_jax.layers.config import TransformerConfig

_FROM_HF_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "relu": "relu"}
_TO_HF_ACT = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}


def read_config_json(path: str) -> tuple[str, dict]:
  """(path of config.json, its dict) of an HF model directory or the file itself."""
  # Local or gs:// (init_from, an export target) through epath.
  where = paths.resolve(path)
  if where.is_dir():
    where = where / "config.json"
  if not where.exists():
    raise FileNotFoundError(f"No config.json at {path}.")
  config_path = os.fspath(where)
  try:
    hf = json.loads(where.read_bytes().decode("utf-8"))
  except (ValueError, RecursionError) as e:  # bad UTF-8 or JSON, absurd nesting
    raise ValueError(f"{config_path} is not valid UTF-8 JSON: {str(e)[:200]}") from e
  if not isinstance(hf, dict):
    raise ValueError(f"{config_path} holds a JSON {type(hf).__name__}, not an object.")
  return config_path, hf


_REQUIRED_INTS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "max_position_embeddings")


def _check_fields(hf: dict, config_path: str) -> None:
  """One clear line for a missing or mistyped field, instead of a KeyError later."""
  for key in _REQUIRED_INTS:
    value = hf.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
      raise ValueError(f"{config_path}: {key} must be a positive integer, got {value!r}.")
  for key in ("model_type", "position_embedding_type", "hidden_act"):
    if key in hf and not isinstance(hf[key], str):
      raise ValueError(f"{config_path}: {key} must be a string, got {hf[key]!r}.")


def load_hf_config(path: str, **overrides) -> TransformerConfig:
  """An HF BERT config.json (or its directory) -> TransformerConfig (+ field overrides)."""
  config_path, hf = read_config_json(path)
  if hf.get("model_type", "bert") != "bert":  # first: another model's fields are not BERT's
    raise ValueError(f"{config_path}: model_type {hf['model_type']!r} is not 'bert'.")
  _check_fields(hf, config_path)
  if hf.get("position_embedding_type", "absolute") != "absolute":
    raise ValueError(f"{config_path}: position_embedding_type "
                     f"{hf['position_embedding_type']!r} is not supported; only 'absolute' "
                     "(learned position embeddings) maps onto our BERT.")
  if hf.get("is_decoder") or hf.get("add_cross_attention"):
    raise ValueError(f"{config_path}: decoder / cross-attention BERTs are not supported.")
  act = hf.get("hidden_act", "gelu")
  if act not in _FROM_HF_ACT:
    raise ValueError(f"{config_path}: hidden_act {act!r} is not supported; expected one "
                     f"of {sorted(_FROM_HF_ACT)}.")
  fields = dict(
      vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
      num_layers=hf["num_hidden_layers"], num_heads=hf["num_attention_heads"],
      mlp_dim=hf["intermediate_size"], max_len=hf["max_position_embeddings"],
      type_vocab_size=hf.get("type_vocab_size", 2), activation=_FROM_HF_ACT[act],
      dropout_rate=hf.get("hidden_dropout_prob", 0.1),
      attention_dropout_rate=hf.get("attention_probs_dropout_prob", 0.1),
      layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
      init_std=hf.get("initializer_range", 0.02), position="learned", init="bert",
      pre_ln=False)
  fields.update(overrides)
  return TransformerConfig(**fields)


def check_hf_compatible(config: TransformerConfig) -> None:
  """ValueError unless HF's BertConfig can express this architecture."""
  problems = []
  if config.position != "learned":
    problems.append(f"position={config.position!r} (HF BERT: learned)")
  if config.pre_ln or config.scale_embeddings or not config.use_bias:
    problems.append("pre_ln / scale_embeddings / use_bias=False")
  if config.d_head * config.num_heads != config.hidden_size:
    problems.append(f"head_dim {config.d_head} x {config.num_heads} heads != hidden_size")
  if not config.type_vocab_size:
    problems.append("type_vocab_size=0")
  if problems:
    raise ValueError("This model has no HF BertConfig equivalent: " + "; ".join(problems))


def hf_config_dict(config: TransformerConfig, architectures: list[str]) -> dict:
  """TransformerConfig -> HF config.json contents; ValueError if HF BERT cannot express it."""
  check_hf_compatible(config)
  return {
      "architectures": architectures, "model_type": "bert",
      "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
      "num_hidden_layers": config.num_layers, "num_attention_heads": config.num_heads,
      "intermediate_size": config.d_mlp, "hidden_act": _TO_HF_ACT[config.activation],
      "hidden_dropout_prob": config.dropout_rate,
      "attention_probs_dropout_prob": config.attention_dropout_rate,
      "max_position_embeddings": config.max_len, "type_vocab_size": config.type_vocab_size,
      "initializer_range": config.init_std, "layer_norm_eps": config.layer_norm_eps,
      "pad_token_id": 0, "position_embedding_type": "absolute",
      "tie_word_embeddings": True, "torch_dtype": config.param_dtype}

