"""The one pretrained-model loader: a Hugging Face BERT directory or one of our checkpoints.

`load_encoder` serves fine-tuning's init_from (config + tokenizer when the task is built,
the encoder weights only when the loop initializes from them: a resumed run never reads
them), predict (the trained checkpoint's config + tokenizer; its weights are read once,
by predict itself) and embed.py; `load_pretraining_params` serves pretraining's
init_from (the encoder plus whichever pretraining heads the source has);
`load_modernbert_trees` a ModernBERT classifier's start (encoder and head).

`path`: an HF BERT directory (config.json + model.safetensors, or one of those files), a
transformers ModernBERT one (interop/modernbert.py: config.family "modernbert", the
ModernBertModel / ModernBertForMaskedLM trees, its BPE tokenizer) or one of our training
checkpoints (a workdir, its checkpoints/ dir, or a step dir).
"""
from __future__ import annotations

import os

import numpy as np

from bert_jax.checkpoint import manager as checkpoint
from bert_jax.runtime import paths
from bert_jax.interop import hf_config
from bert_jax.interop import hf_layout as layout
from bert_jax.interop import hf_load
from bert_jax.interop import modernbert
from bert_jax.layers.param_layout import scan_to_unrolled


# Tasks whose checkpoints hold another model family than BERT's encoder.
_NOT_BERT = {"lm": "a GPT", "translation": "an encoder-decoder Transformer"}


def load_encoder(path: str, *, with_params: bool = True):
  """(config, BertModel params or None, tokenizers.Tokenizer or None) of `path`.

  The config has deterministic=True and scan_layers=False; params are the unrolled
  BertModel tree as numpy ({embeddings, encoder[, pooler]}: no pooler if the
  checkpoint has none; ModernBERT: {embeddings, layers_i, final_norm}), or None without
  `with_params` (only the config is read).
  """
  from bert_jax.data.tokenizer import load_tokenizer  # pylint: disable=g-import-not-at-top
  path = _resolve(path)
  params = None
  if modernbert.is_modernbert_dir(path):  # its ModernBertModel tree, its BPE tokenizer
    config = modernbert.load_modernbert_config(path, deterministic=True)
    if with_params:
      params = modernbert.hf_to_params(hf_load.read_safetensors(path), config,
                                       model="encoder", source=path)
    return config, params, modernbert.load_tokenizer(path) if has_tokenizer(path) else None
  if is_hf_dir(path):
    config = hf_config.load_hf_config(path, deterministic=True)
    if with_params:
      params = hf_load.hf_to_params(hf_load.read_safetensors(path), config, model="encoder",
                                    drop_missing_heads=True, source=path)
    tokenizer_dir = path if has_tokenizer(path) else None
  else:
    config, params, tokenizer_dir, meta = checkpoint.load_params_for_inference(
        path, with_params=with_params, return_meta=True)
    if meta.get("task") in _NOT_BERT:  # before its (BPE) tokenizer fails as "not WordPiece"
      raise ValueError(f"{path} holds {_NOT_BERT[meta['task']]} (task {meta['task']}), not "
                       "a BERT encoder: give a BERT pretraining or fine-tuning workdir, or a "
                       "Hugging Face BERT directory.")
    config = config.replace(deterministic=True, scan_layers=False)
    if with_params:
      params = _encoder_of(params, path)
    if config.family == "modernbert" and tokenizer_dir:  # a BPE tokenizer.json or WordPiece
      return config, params, modernbert.load_tokenizer(tokenizer_dir)
  tokenizer = load_tokenizer(tokenizer_dir) if tokenizer_dir else None
  return config, params, tokenizer


def load_modernbert_trees(path: str):
  """(ModernBertModel tree, its prediction head {dense, norm} or None) of a ModernBERT
  source, as numpy, its weights read once. The head is None when the source has none (a
  bare ModernBertModel); transformers' classifiers share it with ForMaskedLM under the
  same names, so their from_pretrained of an MLM checkpoint starts a classifier from it,
  and fine-tuning does the same."""
  path = _resolve(path)
  if not modernbert.is_modernbert_dir(path):  # our workdirs: {model, head, ...}
    _, params, _ = checkpoint.load_params_for_inference(path)
    return _encoder_of(params, path), params.get("head")
  config = modernbert.load_modernbert_config(path, deterministic=True)
  tensors = hf_load.read_safetensors(path)
  encoder = modernbert.hf_to_params(tensors, config, model="encoder", source=path)
  shapes = {p: s for p, s in modernbert.expected_shapes(config, "masked_lm").items()
            if p.startswith("head/")}
  if not all(modernbert.hf_name(p) in tensors for p in shapes):
    return encoder, None
  head = {p: np.asarray(modernbert.to_ours(p, tensors[modernbert.hf_name(p)], s),
                        config.params_dtype) for p, s in shapes.items()}
  return encoder, layout.unflatten(head)["head"]


def load_pretraining_params(path: str, nsp: bool):
  """The unrolled pretraining tree {bert: encoder, heads...} of `path`, as numpy.

  An HF directory gives BertForPreTraining's heads with NSP (missing heads left out) and
  the encoder alone without; a ModernBERT directory its ModernBertForMaskedLM tree (a
  missing MLM head fresh); our checkpoints give their whole params tree.
  """
  path = _resolve(path)
  if modernbert.is_modernbert_dir(path):  # ModernBertForMaskedLM's tree (no NSP head)
    return modernbert.load_modernbert(path, allow_missing_heads=True)[1]
  if is_hf_dir(path):
    _, params = hf_load.load_hf_bert(path, model="pretraining" if nsp else "encoder",
                                     allow_missing_heads=True)
    return params if nsp or "bert" in params else {"bert": params}
  _, params, _ = checkpoint.load_params_for_inference(path)
  return scan_to_unrolled(params)


def _resolve(path: str) -> str:
  # Local or gs:// through epath; a local path stays as given (messages name it so).
  where = paths.resolve(path)
  if not where.exists():
    raise FileNotFoundError(f"Checkpoint path {path} does not exist.")
  if where.name in ("config.json", "model.safetensors") and not where.is_dir():
    path = os.fspath(where.parent) if paths.is_remote(path) else (os.path.dirname(path) or ".")
  if not (is_hf_dir(path) or is_our_checkpoint(path)):
    raise ValueError(
        f"{path} is neither a Hugging Face BERT directory (config.json + model.safetensors) "
        "nor a bert_jax training checkpoint (a workdir with checkpoints/<step>/state, or a "
        "step directory).")
  return path


def _encoder_of(params, path: str):
  """The BertModel subtree of a pretraining / fine-tuning / encoder params tree."""
  flat = layout.plain_flat(params)
  if any(p.startswith("bert/") for p in flat):  # pretraining / fine-tuning trees
    flat = {p[len("bert/"):]: v for p, v in flat.items() if p.startswith("bert/")}
  elif any(p.startswith("model/embeddings/") for p in flat):  # ModernBERT's trees
    flat = {p[len("model/"):]: v for p, v in flat.items() if p.startswith("model/")}
  if not any(p.startswith("embeddings/") for p in flat):
    raise ValueError(f"the checkpoint at {path} holds no BERT encoder (params: "
                     f"{sorted({p.split('/')[0] for p in flat})}).")
  return layout.unflatten(flat)


def is_hf_dir(path: str) -> bool:
  return (paths.resolve(path) / "config.json").is_file()


def has_tokenizer(path: str) -> bool:
  return any((paths.resolve(path) / n).exists() for n in ("vocab.txt", "tokenizer.json"))


def is_our_checkpoint(path: str) -> bool:
  """A workdir, its checkpoints/ dir or a step dir of bert_jax.checkpoint.manager's layout."""
  where = paths.resolve(path)
  if not where.is_dir():
    return False
  if (where / "checkpoints").is_dir() or (where / "state").is_dir():
    return True
  return any(p.name.isdigit() and (p / "state").is_dir() for p in where.iterdir())
