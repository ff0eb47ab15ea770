"""Hugging Face BERT checkpoints <-> our param trees, with safetensors and numpy only.

An HF BERT directory holds config.json + model.safetensors (+ vocab.txt / tokenizer.json).
Accepted layouts: saved from BertForPreTraining (`bert.` prefix + `cls.` heads) or BertModel
(no prefix, no heads), by transformers 4.x or 5.x (same tensor names), old TF-converted
`LayerNorm.gamma/beta` names, the tied `cls.predictions.decoder.weight` present or not,
sharded (`model.safetensors.index.json`). Torch pickles (pytorch_model.bin) are refused.

Name mapping (HF Linear weights are [out, in], ours are [in, out]):
  bert.embeddings.{word,position,token_type}_embeddings  -> bert/embeddings/*_embedder
  bert.encoder.layer.i.attention.self.{query,key,value}  -> .../attention/{q,k,v}
      weight [heads*d, H] -> kernel [H, heads, d];  bias [heads*d] -> [heads, d]
  bert.encoder.layer.i.attention.output.dense            -> .../attention/out
      weight [H, heads*d] -> kernel [heads, d, H]
  ...attention.output.LayerNorm / intermediate / output  -> attention_norm / mlp/wi / mlp/wo
  ...output.LayerNorm                                    -> mlp_norm
  bert.pooler.dense / cls.predictions.* / cls.seq_relationship -> pooler / mlm_head / nsp_head
  classifier / qa_outputs (fine-tuned heads, saved only)       -> classifier / qa_outputs
An untied decoder weight cannot be represented (our MLM head reads the token embeddings),
so a checkpoint whose `cls.predictions.decoder.weight` differs from them is an error.
"""
from __future__ import annotations

import json
import os
from typing import Any, Sequence

from absl import logging
import numpy as np
import safetensors.numpy

from bert_jax import paths
from bert_jax.interop import hf_layout as layout
from bert_jax.layers.config import TransformerConfig

_FROM_HF_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "relu": "relu"}
_TO_HF_ACT = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
_BUFFERS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")
_DECODER_W, _DECODER_B = "cls.predictions.decoder.weight", "cls.predictions.decoder.bias"
_MLM_BIAS = layout.MLM_BIAS
_HEADS = ("pooler", "mlm_head", "nsp_head")  # top-level modules a checkpoint may lack
MODELS = ("pretraining", "encoder")


# ---------------------------------------------------------------------------- config
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


def _check_hf_compatible(config: TransformerConfig) -> None:
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
  _check_hf_compatible(config)
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


# ---------------------------------------------------------------------------- tensors
def read_safetensors(path: str) -> dict[str, np.ndarray]:
  """All tensors of an HF directory (single file or sharded) as numpy arrays.

  Files are read through epath into memory (local or gs://): safetensors' load_file
  memory-maps local paths only, and the arrays are copied out either way."""
  directory = paths.resolve(path)
  index = directory / "model.safetensors.index.json"
  single = directory / "model.safetensors"
  if single.exists():
    return safetensors.numpy.load(single.read_bytes())
  if index.exists():
    shards = sorted(set(json.loads(index.read_bytes().decode("utf-8"))["weight_map"].values()))
    tensors = {}
    for shard in shards:
      tensors.update(safetensors.numpy.load((directory / shard).read_bytes()))
    return tensors
  for name in ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack"):
    if (directory / name).exists():
      raise ValueError(
          f"{path} holds {name} but no model.safetensors: only safetensors checkpoints are "
          "supported (no torch at run time). Convert once with transformers: "
          "`AutoModel.from_pretrained(dir).save_pretrained(dir, safe_serialization=True)`.")
  raise FileNotFoundError(f"No model.safetensors in {path}.")


def canonical_names(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """BertForPreTraining names: `bert.` prefix added, gamma/beta renamed, buffers dropped."""
  out = {}
  for name, value in tensors.items():
    if name.startswith(("embeddings.", "encoder.", "pooler.")):
      name = "bert." + name                       # saved from a BertModel
    if name.endswith("LayerNorm.gamma"):           # TF-era names
      name = name[:-len("gamma")] + "weight"
    elif name.endswith("LayerNorm.beta"):
      name = name[:-len("beta")] + "bias"
    if name in _BUFFERS:
      continue
    if name in out:
      raise ValueError(f"Tensor {name} appears twice in the checkpoint (under two names).")
    out[name] = value
  return out


def _untie(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Folds the tied decoder tensors into the embeddings / MLM bias, or refuses."""
  tensors = dict(tensors)
  decoder = tensors.pop(_DECODER_W, None)
  embeddings = tensors.get("bert.embeddings.word_embeddings.weight")
  if decoder is not None and embeddings is not None and not np.array_equal(decoder, embeddings):
    raise ValueError(
        f"{_DECODER_W} differs from bert.embeddings.word_embeddings.weight: an untied MLM "
        "decoder cannot be loaded (our MLM head ties it to the token embeddings). Load "
        "with model='encoder' to use the encoder alone.")
  decoder_bias = tensors.pop(_DECODER_B, None)
  if decoder_bias is not None:
    bias = tensors.setdefault(_MLM_BIAS, decoder_bias)
    if not np.array_equal(bias, decoder_bias):
      raise ValueError(f"{_DECODER_B} differs from {_MLM_BIAS}; they are one tied tensor.")
  return tensors


def hf_to_params(tensors: dict[str, np.ndarray], config: TransformerConfig, *,
                 model: str = "pretraining", allow_missing_heads: bool = False,
                 drop_missing_heads: bool = False, seed: int = 0, source: str = "checkpoint"):
  """HF tensors -> our param tree (numpy), for BertForPreTraining or BertModel.

  Raises ValueError naming every missing, unexpected and mis-shaped tensor (for
  model="encoder", tensors outside `bert.` are ignored, not unexpected). Missing
  head tensors (pooler, MLM/NSP heads) are freshly initialized with
  `allow_missing_heads`, or left out of the tree with `drop_missing_heads`.
  """
  if model not in MODELS:
    raise ValueError(f"model={model!r}; expected one of {MODELS}.")
  tensors = canonical_names(tensors)
  if model == "encoder":  # any task head (cls., classifier., qa_outputs., ...) is not needed
    heads = sorted({k.split(".")[0] for k in tensors if not k.startswith("bert.")})
    if heads:
      logging.info("%s: ignoring the non-encoder tensors under %s", source, ", ".join(heads))
    tensors = {k: v for k, v in tensors.items() if k.startswith("bert.")}
  else:
    tensors = _untie(tensors)
  table = layout.hf_name_table(config, model)   # our path -> (hf name, kind)
  expected = layout.expected_shapes(config, model)
  missing, shaped, flat = [], [], {}
  for path, (hf_name, kind) in table.items():
    want = layout.hf_shape(kind, expected[path])
    if hf_name not in tensors:
      missing.append((path, hf_name))
    elif tuple(tensors[hf_name].shape) != want:
      shaped.append(f"{hf_name}: {tuple(tensors[hf_name].shape)} (expected {want})")
    else:
      flat[path] = layout.to_ours(kind, tensors[hf_name], expected[path])
  unexpected = sorted(set(tensors) - {hf for hf, _ in table.values()})
  head_missing = [p for p, _ in missing if layout.head_of(p) in _HEADS]
  fatal = [hf for p, hf in missing if p not in head_missing or not (
      allow_missing_heads or drop_missing_heads)]
  if fatal or unexpected or shaped:
    lines = [f"{source} does not match the {model} BERT of its config:"]
    lines += [f"  missing: {', '.join(fatal)}"] if fatal else []
    lines += [f"  unexpected: {', '.join(unexpected)}"] if unexpected else []
    lines += [f"  mis-shaped: {s}" for s in shaped]
    if fatal and not unexpected and not shaped and all(p in head_missing for p, _ in missing):
      lines.append("  (only head tensors are missing: pass allow_missing_heads=True to "
                   "initialize them freshly for fine-tuning)")
    raise ValueError("\n".join(lines))
  if head_missing and allow_missing_heads:
    fresh = layout.fresh_params({p: expected[p] for p in head_missing}, config.init_std, seed)
    heads = sorted({layout.head_of(p) for p in head_missing})
    logging.warning("%s lacks %s: %d tensors freshly initialized (fine-tune them).",
                    source, "/".join(heads), len(head_missing))
    flat.update({p: fresh[p] for p in head_missing})
  dtype = config.params_dtype
  flat = {p: np.asarray(v, dtype=dtype) for p, v in flat.items()}
  if config.scan_layers:
    flat = layout.stack_layers(flat)
  return layout.unflatten(flat)


def load_hf_bert(path: str, *, model: str = "pretraining", scan_layers: bool = False,
                 allow_missing_heads: bool = False, seed: int = 0, **config_overrides):
  """Loads an HF BERT directory -> (TransformerConfig, params as nested dict of numpy).

  Args:
    path: directory with config.json and model.safetensors (or a sharded index).
    model: "pretraining" -> the BertForPreTraining tree ({bert, mlm_head, nsp_head});
      "encoder" -> the BertModel tree ({embeddings, encoder, pooler}); every tensor
      outside `bert.` (MLM/NSP heads, a fine-tuned classifier, ...) is then ignored.
    scan_layers: stack the layers (`encoder/layers/...: [L, ...]`) for a scanned model.
    allow_missing_heads: a checkpoint without pooler / MLM / NSP tensors (e.g. a
      BertModel checkpoint loaded for pretraining) gets them freshly initialized, with
      a log line, instead of an error.
    seed: numpy seed of those fresh heads (BERT init: truncated normal kernels).
    **config_overrides: TransformerConfig fields, e.g. dtype="bfloat16",
      param_dtype="bfloat16" (params are cast to it), deterministic=True.
  """
  config = load_hf_config(path, scan_layers=scan_layers, **config_overrides)
  tensors = read_safetensors(path)
  params = hf_to_params(tensors, config, model=model, allow_missing_heads=allow_missing_heads,
                        seed=seed, source=path)
  return config, params


# ---------------------------------------------------------------------------- saving
def params_to_hf(config: TransformerConfig, params: Any, model: str | None = None
                 ) -> tuple[dict[str, np.ndarray], str]:
  """Our tree (scanned or not, boxed or not) -> (HF tensors, model).

  model: one of hf_layout.MODELS, or None to tell pretraining from encoder trees by
  their `bert/` prefix. Pretraining trees may lack the pooler / NSP head
  (BertForMaskedLM); a fine-tuned (HEAD_MODELS) tree must hold every tensor of
  transformers' class.
  """
  _check_hf_compatible(config)
  flat = layout.plain_flat(params)
  if model is None:
    model = "pretraining" if any(p.startswith("bert/") for p in flat) else "encoder"
  table = layout.hf_name_table(config, model)
  head = layout.HEAD_MODELS.get(model, (None, None, None))[2]
  num_labels = flat[f"{head}/bias"].shape[-1] if f"{head}/bias" in flat else 2
  expected = layout.expected_shapes(config, model, num_labels)
  optional = () if head else _HEADS
  missing = [p for p in table if p not in flat and layout.head_of(p) not in optional]
  unexpected = sorted(set(flat) - set(table))
  shaped = [f"{p}: {flat[p].shape} (expected {expected[p]})" for p in table
            if p in flat and tuple(flat[p].shape) != expected[p]]
  if missing or unexpected or shaped:
    raise ValueError(f"params do not match the {model} BERT of the config: missing "
                     f"{missing}, unexpected {unexpected}, mis-shaped {shaped}")
  tensors = {}
  for path, (hf_name, kind) in table.items():
    if path in flat:
      name = hf_name if model != "encoder" else hf_name[len("bert."):]
      tensors[name] = np.ascontiguousarray(layout.to_hf(kind, flat[path]))
  return tensors, model


def save_hf_bert(path: str, config: TransformerConfig, params: Any,
                 tokenizer_or_vocab: Any = None, *, model: str | None = None,
                 labels: Sequence[str] | None = None, regression: bool = False) -> dict:
  """Writes an HF BERT directory: config.json, model.safetensors (+ vocab / tokenizer).

  params: the BertForPreTraining tree (saved as BertForPreTraining with `bert.`/`cls.`
  names, or BertForMaskedLM when it has no NSP head), the BertModel tree (saved as
  BertModel, no prefix), or with `model` one of hf_layout.HEAD_MODELS, a fine-tuned
  tree of models/heads.py (saved as BertForSequenceClassification /
  BertForTokenClassification / BertForQuestionAnswering); scanned or unrolled,
  logically boxed or plain.
  tokenizer_or_vocab: a tokenizers.Tokenizer (writes vocab.txt + tokenizer.json +
  tokenizer_config.json), a vocab.txt path, or a directory whose vocab / tokenizer
  files are copied; None writes weights only.
  labels: the classes in id order (config.json's id2label / label2id) of a
  classification head; regression: a one-output sequence regression head
  (problem_type "regression").
  Returns the config.json dict written.
  """
  tensors, model = params_to_hf(config, params, model)  # all checks before writing anything
  if model in layout.HEAD_MODELS:
    architectures = [layout.HEAD_MODELS[model][0]]
  elif model == "encoder":
    architectures = ["BertModel"]
  else:
    architectures = ["BertForPreTraining" if "cls.seq_relationship.weight" in tensors
                     else "BertForMaskedLM"]
  hf_config = hf_config_dict(config, architectures)
  if model in ("sequence_classification", "token_classification"):
    hf_config.update(_label_fields(tensors["classifier.bias"].shape[0], labels, regression,
                                   model == "sequence_classification"))
  directory = paths.resolve(path)  # local or gs://
  directory.mkdir(parents=True, exist_ok=True)
  (directory / "config.json").write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
  (directory / "model.safetensors").write_bytes(
      safetensors.numpy.save(tensors, metadata={"format": "pt"}))
  if tokenizer_or_vocab is not None:
    _save_tokenizer(path, tokenizer_or_vocab, config.max_len)
  return hf_config


def _label_fields(num_labels: int, labels: Sequence[str] | None, regression: bool,
                  sequence: bool) -> dict:
  """config.json's id2label / label2id (+ problem_type of a sequence head)."""
  if regression:
    labels = labels or ["LABEL_0"]  # transformers' own name for an unnamed output
  if labels is None or len(labels) != num_labels:
    raise ValueError(f"the classifier has {num_labels} outputs but the label list is "
                     f"{None if labels is None else list(labels)}.")
  if regression and num_labels != 1:
    raise ValueError(f"a regression head has one output, not {num_labels}.")
  out = {"id2label": {str(i): str(n) for i, n in enumerate(labels)},
         "label2id": {str(n): i for i, n in enumerate(labels)}}
  if len(out["label2id"]) != num_labels:
    raise ValueError(f"duplicate names in the label list {list(labels)}.")
  if sequence:
    out["problem_type"] = "regression" if regression else "single_label_classification"
  return out


_TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                    "special_tokens_map.json")


def _save_tokenizer(path: str, tokenizer_or_vocab: Any, model_max_length: int) -> None:
  directory = paths.resolve(path)  # files copied and written through epath: local or gs://
  if isinstance(tokenizer_or_vocab, (str, os.PathLike)):
    src = paths.resolve(os.fspath(tokenizer_or_vocab))
    if src.is_dir():
      names = [n for n in _TOKENIZER_FILES if (src / n).exists()]
      if not names:
        raise FileNotFoundError(f"No vocab.txt or tokenizer.json in {src}.")
      for name in names:
        (directory / name).write_bytes((src / name).read_bytes())
    else:
      (directory / "vocab.txt").write_bytes(src.read_bytes())
    return
  from bert_jax.data.tokenizer import save_vocab  # pylint: disable=g-import-not-at-top
  save_vocab(tokenizer_or_vocab, os.fspath(directory / "vocab.txt"))
  (directory / "tokenizer.json").write_bytes(tokenizer_or_vocab.to_str(pretty=True).encode())
  normalizer = json.loads(tokenizer_or_vocab.to_str()).get("normalizer") or {}
  (directory / "tokenizer_config.json").write_text(json.dumps(
      {"tokenizer_class": "BertTokenizer",
       "do_lower_case": bool(normalizer.get("lowercase", False)),
       "model_max_length": model_max_length}, indent=2))  # truncation length
