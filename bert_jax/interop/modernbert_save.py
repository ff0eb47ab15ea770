"""Saving our ModernBERT trees as transformers ModernBERT directories (config.json,
model.safetensors, the tokenizer files), which transformers 4.57 loads as
ModernBertForMaskedLM / ModernBertForSequenceClassification /
ModernBertForTokenClassification (or ModernBertModel for an encoder tree).

As hf_save.py: every check runs before the first file is written, each file is written
atomically and config.json last, so a refused or interrupted export never leaves a
directory that loads. An existing non-empty directory is refused (nothing of it is
replaced). Names and layouts: modernbert.py.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np
import safetensors.numpy

from bert_jax.interop import hf_layout as layout
from bert_jax.interop import hf_save
from bert_jax.interop import modernbert as mb
from bert_jax.layers.config import TransformerConfig
from bert_jax.models import modernbert as modernbert_model
from bert_jax.runtime import paths

_TO_HF_ACT = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}


def check_modernbert_compatible(config: TransformerConfig) -> None:
  """ValueError (one line) unless transformers' ModernBertConfig expresses this model."""
  problems = []
  if config.family != "modernbert":
    problems.append(f"family={config.family!r}")
  if config.position != "rotary" or not config.pre_ln or config.scale_embeddings:
    problems.append("position / pre_ln / scale_embeddings other than rotary, pre-LN, none")
  if config.type_vocab_size:
    problems.append(f"type_vocab_size={config.type_vocab_size} (no token types)")
  if config.d_head * config.num_heads != config.hidden_size:
    problems.append(f"head_dim {config.d_head} x {config.num_heads} heads != hidden_size")
  if config.activation not in _TO_HF_ACT:
    problems.append(f"activation={config.activation!r}")
  if problems:
    raise ValueError("This model has no transformers ModernBertConfig equivalent: "
                     + "; ".join(problems) + ".")


def modernbert_config_dict(config: TransformerConfig, architectures: list[str],
                           special_ids: dict | None = None) -> dict:
  """TransformerConfig -> config.json; special_ids: pad/cls/sep ids of the tokenizer."""
  check_modernbert_compatible(config)
  act = _TO_HF_ACT[config.activation]
  mlp_bias = modernbert_model.mlp_bias(config)
  out = {
      "architectures": architectures, "model_type": "modernbert",
      "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
      "intermediate_size": config.d_mlp, "num_hidden_layers": config.num_layers,
      "num_attention_heads": config.num_heads, "max_position_embeddings": config.max_len,
      "hidden_activation": act, "classifier_activation": act,
      "norm_eps": config.layer_norm_eps, "norm_bias": config.norm_bias,
      "attention_bias": config.use_bias, "mlp_bias": mlp_bias,
      "classifier_bias": config.head_bias, "decoder_bias": config.decoder_bias,
      "global_rope_theta": config.rotary_base, "local_rope_theta": config.local_rotary_base,
      # No window: every layer global (transformers would make layers with window 0).
      "local_attention": config.local_window or mb.DEFAULTS["local_attention"],
      "global_attn_every_n_layers": config.global_every if config.local_window else 1,
      "classifier_pooling": config.pooling, "embedding_dropout": config.dropout_rate,
      "mlp_dropout": config.dropout_rate, "classifier_dropout": config.dropout_rate,
      "attention_dropout": config.attention_dropout_rate,
      "initializer_range": config.init_std, "initializer_cutoff_factor": 2.0,
      "tie_word_embeddings": True, "torch_dtype": config.param_dtype}
  ids = dict(special_ids or {})
  # transformers' default pad id (50283) is the padding_idx of its token table: it must
  # be a row of this one.
  if ids.get("pad_token_id") is None and config.vocab_size <= 50283:
    ids["pad_token_id"] = 0
  if ids.get("cls_token_id") is not None:
    ids.setdefault("bos_token_id", ids["cls_token_id"])
  if ids.get("sep_token_id") is not None:
    ids.setdefault("eos_token_id", ids["sep_token_id"])
  out.update({k: v for k, v in ids.items() if v is not None})
  return out


def _tree_model(flat: dict) -> str:
  if any(p.startswith("classifier/") for p in flat):
    raise ValueError("a classifier tree: pass model='sequence_classification' or "
                     "'token_classification'.")
  return "masked_lm" if any(p.startswith("head/") for p in flat) else "encoder"


def params_to_hf(config: TransformerConfig, params: Any, model: str | None = None
                 ) -> tuple[dict[str, np.ndarray], str]:
  """Our tree (boxed or not, {'params': ...} or not) -> (transformers tensors, model).
  model: one of modernbert.MODELS; None tells masked_lm from encoder trees by the head.
  A {'model': encoder} tree is saved as the encoder. Everything is checked here."""
  check_modernbert_compatible(config)
  flat = layout.plain_flat(params)
  if model is None:
    model = _tree_model(flat)
  if model == "encoder" and flat and all(p.startswith("model/") for p in flat):
    flat = {p[len("model/"):]: v for p, v in flat.items()}
  if model not in mb.MODELS:
    raise ValueError(f"model={model!r}; expected one of {tuple(mb.MODELS)}.")
  labels = flat.get("classifier/bias")
  expected = mb.expected_shapes(config, model, labels.shape[-1] if labels is not None else 2)
  missing = [p for p in expected if p not in flat]
  unexpected = sorted(set(flat) - set(expected))
  shaped = [f"{p} {flat[p].shape} (expected {expected[p]})" for p in expected
            if p in flat and tuple(flat[p].shape) != expected[p]]
  if missing or unexpected or shaped:
    listed = mb._listed  # pylint: disable=protected-access
    problems = [f"missing {listed(missing)}"] if missing else []
    problems += [f"unexpected {listed(unexpected)}"] if unexpected else []
    problems += [f"mis-shaped {listed(shaped)}"] if shaped else []
    raise ValueError(f"params do not match the ModernBERT {model} of the config: "
                     + "; ".join(problems))
  tensors = {}
  for path in expected:
    value = mb.to_hf(path, np.asarray(flat[path]))
    if mb.is_vocab_rows(path):  # transformers sees the tokenizer's ids, no padding rows
      value = value[:config.vocab_size]
    tensors[mb.hf_name(path)] = np.ascontiguousarray(value)
  return tensors, model


def save_modernbert(path: str, config: TransformerConfig, params: Any,
                    tokenizer_or_dir: Any = None, *, model: str | None = None,
                    labels: Sequence[str] | None = None, regression: bool = False) -> dict:
  """Writes a transformers ModernBERT directory; returns the config.json dict written.

  params: our ModernBertForMaskedLM tree (-> ModernBertForMaskedLM), a ModernBertModel
  tree (-> ModernBertModel), or with model= "sequence_classification" /
  "token_classification" a classifier tree (labels: the class names in id order,
  default LABEL_i; regression: a one-output sequence head, problem_type "regression").
  tokenizer_or_dir: a directory whose tokenizer files are copied (tokenizer.json,
  tokenizer_config.json, special_tokens_map.json, vocab.txt), a tokenizers.Tokenizer,
  or None (weights only). `path` must be new or empty.
  """
  tensors, model = params_to_hf(config, params, model)
  tokenizer = _tokenizer_of(tokenizer_or_dir)
  special = {f"{name}_token_id": tokenizer.token_to_id(f"[{name.upper()}]")
             for name in ("pad", "cls", "sep")} if tokenizer is not None else None
  hf = modernbert_config_dict(config, [mb.MODELS[model]], special)
  if model in ("sequence_classification", "token_classification"):
    num_labels = tensors["classifier.bias"].shape[0]
    names = list(labels) if labels is not None else [f"LABEL_{i}" for i in range(num_labels)]
    if regression and model != "sequence_classification":
      raise ValueError(f"regression=True needs model='sequence_classification', not {model!r}.")
    hf.update(hf_save._label_fields(  # pylint: disable=protected-access
        num_labels, names, regression, model == "sequence_classification"))
  directory = paths.resolve(path)  # local or gs://
  if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
    raise ValueError(f"{path} exists and is not an empty directory: the export writes a "
                     "new one (nothing there is replaced).")
  directory.mkdir(parents=True, exist_ok=True)
  paths.write_atomically(directory / "model.safetensors",
                         safetensors.numpy.save(tensors, metadata={"format": "pt"}))
  if tokenizer_or_dir is not None:
    _save_tokenizer(path, tokenizer_or_dir, tokenizer, config.max_len)
  # Last: a directory with a config.json holds a whole model.
  paths.write_atomically(directory / "config.json",
                         json.dumps(hf, indent=2, sort_keys=True) + "\n")
  return hf


def _tokenizer_of(tokenizer_or_dir: Any):
  """The tokenizers.Tokenizer given, or that of the directory given (its special ids go
  into config.json); checked before anything is written."""
  if tokenizer_or_dir is None or hasattr(tokenizer_or_dir, "token_to_id"):
    return tokenizer_or_dir
  return mb.load_tokenizer(str(tokenizer_or_dir))


def _save_tokenizer(path: str, tokenizer_or_dir: Any, tokenizer, max_len: int) -> None:
  """Copies a directory's tokenizer files or writes a Tokenizer's; transformers'
  tokenizer then feeds ModernBERT's inputs only (no token_type_ids)."""
  from tokenizers import models  # pylint: disable=g-import-not-at-top
  directory = paths.resolve(path)
  if not hasattr(tokenizer_or_dir, "token_to_id") or isinstance(tokenizer.model,
                                                                 models.WordPiece):
    hf_save._save_tokenizer(path, tokenizer_or_dir, max_len)  # pylint: disable=protected-access
    config = {}
    if (directory / "tokenizer_config.json").exists():
      config = json.loads((directory / "tokenizer_config.json").read_text())
  else:
    paths.write_atomically(directory / "tokenizer.json", tokenizer.to_str(pretty=True))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len,
              **{f"{n}_token": f"[{n.upper()}]" for n in ("cls", "sep", "pad", "mask", "unk")
                 if tokenizer.token_to_id(f"[{n.upper()}]") is not None}}
  if config.get("model_input_names") != ["input_ids", "attention_mask"]:
    config["model_input_names"] = ["input_ids", "attention_mask"]
    paths.write_atomically(directory / "tokenizer_config.json", json.dumps(config, indent=2))

