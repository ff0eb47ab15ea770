"""Saving our BERT param trees as Hugging Face BERT directories (safetensors + config.json).

What is written loads in transformers as BertForPreTraining / BertForMaskedLM / BertModel,
or as its sequence / token classification or question answering class for a fine-tuned
tree; every check runs before the first file is written, so a refused model leaves nothing
half-written. Where each tensor goes: hf_layout.py; config.json: hf_config.py.
"""
from __future__ import annotations

import json
import os
from typing import Any, Sequence

import numpy as np
import safetensors.numpy

from bert_jax.runtime import paths
from bert_jax.interop import hf_layout as layout
from bert_jax.interop.hf_config import check_hf_compatible, hf_config_dict
from bert_jax.layers.config import TransformerConfig


def params_to_hf(config: TransformerConfig, params: Any, model: str | None = None
                 ) -> tuple[dict[str, np.ndarray], str]:
  """Our tree (scanned or not, boxed or not) -> (HF tensors, model).

  model: one of hf_layout.MODELS, or None to tell pretraining from encoder trees by
  their `bert/` prefix. Pretraining trees may lack the pooler / NSP head
  (BertForMaskedLM); a fine-tuned (HEAD_MODELS) tree must hold every tensor of
  transformers' class.
  """
  check_hf_compatible(config)
  flat = layout.plain_flat(params)
  if model is None:
    model = "pretraining" if any(p.startswith("bert/") for p in flat) else "encoder"
  table = layout.hf_name_table(config, model)
  head = layout.HEAD_MODELS.get(model, (None, None, None))[2]
  num_labels = flat[f"{head}/bias"].shape[-1] if f"{head}/bias" in flat else 2
  expected = layout.expected_shapes(config, model, num_labels)
  optional = () if head else layout.PRETRAINING_HEADS
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
      value = layout.to_hf(kind, flat[path])
      if layout.is_vocab_rows(path):  # transformers sees the tokenizer's ids, no padding
        value = value[:config.vocab_size]
      tensors[name] = np.ascontiguousarray(value)
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
  paths.write_atomically(directory / "model.safetensors",
                         safetensors.numpy.save(tensors, metadata={"format": "pt"}))
  if tokenizer_or_vocab is not None:
    _save_tokenizer(path, tokenizer_or_vocab, config.max_len)
  # Last: a directory with a config.json holds a whole model (export's check relies on it).
  paths.write_atomically(directory / "config.json",
                         json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
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
        paths.write_atomically(directory / name, (src / name).read_bytes())
    else:
      paths.write_atomically(directory / "vocab.txt", src.read_bytes())
    return
  from bert_jax.data.tokenizer import save_vocab  # pylint: disable=g-import-not-at-top
  save_vocab(tokenizer_or_vocab, os.fspath(directory / "vocab.txt"))
  paths.write_atomically(directory / "tokenizer.json", tokenizer_or_vocab.to_str(pretty=True))
  normalizer = json.loads(tokenizer_or_vocab.to_str()).get("normalizer") or {}
  paths.write_atomically(directory / "tokenizer_config.json", json.dumps(
      {"tokenizer_class": "BertTokenizer",
       "do_lower_case": bool(normalizer.get("lowercase", False)),
       "model_max_length": model_max_length}, indent=2))  # truncation length
