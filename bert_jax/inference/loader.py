"""One loader for every reader of a trained model (fill-mask, the pictures, the Python API):
"our workdir or a Hugging Face directory" -> model + tokenizer.

BERT comes from an HF BERT directory (config.json + model.safetensors + vocab), ModernBERT
from a transformers ModernBERT one (interop/modernbert.py; its BPE tokenizer.json as
saved), either from one of our pretraining / fine-tuning checkpoints; the encoder-decoder
and GPT come from our workdirs (their tasks save the Transformer / GPT param trees). The
family is read from the param tree (ModernBERT's: from config.family), and the saved task
name (config.task) is quoted when a checkpoint holds none of them.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

from bert_jax.layers.config import TransformerConfig


class InputError(Exception):
  """Bad user input: the CLIs print it as one line and exit with status 2."""


@dataclasses.dataclass
class Loaded:
  kind: str                   # "bert" (config.family: BERT or ModernBERT) | "seq2seq" | "gpt"
  config: TransformerConfig   # deterministic=True
  # bert: {"bert": encoder[, "mlm_head"]}; ModernBERT: {"model": encoder[, "head",
  # "decoder_bias"]} (ModernBertForMaskedLM's); else the model's tree
  params: dict
  tokenizer: Any              # tokenizers.Tokenizer
  task: str                   # config.task of our checkpoints, "hf" for HF directories
  source: str

  @property
  def has_mlm_head(self) -> bool:
    return "mlm_head" in self.params or "head" in self.params


def _hf_bert(path: str):
  from bert_jax.interop import hf_config, hf_load  # pylint: disable=g-import-not-at-top
  config = hf_config.load_hf_config(path, deterministic=True)
  tensors = hf_load.read_safetensors(path)
  try:  # keeps the MLM head when the directory has one (BertForPreTraining / ForMaskedLM)
    params = hf_load.hf_to_params(dict(tensors), config, model="pretraining",
                                  drop_missing_heads=True, source=path)
  except ValueError:  # e.g. a fine-tuned classifier: its encoder is all we draw
    params = {"bert": hf_load.hf_to_params(tensors, config, model="encoder",
                                           drop_missing_heads=True, source=path)}
  return config, params


def _hf_modernbert(path: str):
  """A transformers ModernBERT directory: {model[, head, decoder_bias]} (the MLM tree when
  it has the MLM head), its tokenizer.json (BPE) as saved."""
  from bert_jax.interop import hf_load, modernbert  # pylint: disable=g-import-not-at-top
  config = modernbert.load_modernbert_config(path, deterministic=True)
  tensors = hf_load.read_safetensors(path)
  model = modernbert.model_of(tensors)
  params = modernbert.hf_to_params(tensors, config, model=model, source=path)
  return config, params if model == "masked_lm" else {"model": params}


def _ours(path: str):
  from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
  from bert_jax.interop import hf_layout  # pylint: disable=g-import-not-at-top
  config, params, tokenizer_dir, meta = checkpoint.load_params_for_inference(
      path, return_meta=True)
  task = str(meta.get("task") or meta.get("config", {}).get("task") or "unknown")
  tree = hf_layout.unflatten(hf_layout.plain_flat(params))   # unboxed, BERT layers unrolled
  if config.family == "modernbert":  # ModernBertForMaskedLM's tree, or a classifier's
    mlm = "head" in tree and "classifier" not in tree
    params = ({k: v for k, v in tree.items() if k in ("model", "head", "decoder_bias")}
              if mlm else {"model": tree.get("model", tree)})
    return "bert", config.replace(deterministic=True), params, tokenizer_dir, task
  if "bert" in tree or "embeddings" in tree:
    bert = tree["bert"] if "bert" in tree else {
        k: v for k, v in tree.items() if k in ("embeddings", "encoder", "pooler")}
    params = {"bert": bert, **({"mlm_head": tree["mlm_head"]} if "mlm_head" in tree else {})}
    return "bert", config.replace(deterministic=True, scan_layers=False), params, tokenizer_dir, task
  # Decoder stacks keep the layout they were saved in (scanned or not): the collector
  # in attention.py reads both.
  from flax import linen as nn  # pylint: disable=g-import-not-at-top
  plain = nn.meta.unbox(params)
  plain = plain.get("params", plain) if isinstance(plain, dict) else plain
  config = config.replace(deterministic=True, decode=False)
  if "decoder" in plain and "embedder" in plain and "encoder" in plain:
    return "seq2seq", config, plain, tokenizer_dir, task
  if "decoder" in plain and "token_embedder" in plain:
    return "gpt", config, plain, tokenizer_dir, task
  raise InputError(f"the checkpoint at {path} (config.task={task!r}) holds no BERT, "
                   f"encoder-decoder or GPT model (params: {sorted(plain)})")


def load(path: str, what: str = "--checkpoint") -> Loaded:
  """Loads `path` or raises InputError with one line naming the problem (and `what`: the
  flag or argument the path came from)."""
  from bert_jax.checkpoint import pretrained  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizer import load_tokenizer  # pylint: disable=g-import-not-at-top
  from bert_jax.runtime import paths  # pylint: disable=g-import-not-at-top
  from bert_jax.interop import gpt2, modernbert  # pylint: disable=g-import-not-at-top
  if not os.path.exists(path):
    raise InputError(f"{what} {path} does not exist")
  if os.path.isfile(path) and os.path.basename(path) in ("config.json", "model.safetensors"):
    path = os.path.dirname(path) or "."
  tokenizer_dir: Optional[str]
  try:
    if os.path.isfile(os.path.join(path, "config.json")):
      kind, task = "bert", "hf"
      config, params = (_hf_modernbert(path) if modernbert.is_modernbert_dir(path)
                        else _hf_bert(path))
      tokenizer_dir = path if pretrained.has_tokenizer(path) else None
    elif pretrained.is_our_checkpoint(path):
      kind, config, params, tokenizer_dir, task = _ours(path)
    else:
      raise InputError(f"{what} {path} is neither a Hugging Face BERT directory "
                       "(config.json + model.safetensors) nor a bert_jax workdir")
  except InputError:
    raise
  except KeyError as e:  # e.g. a word2vec workdir: its meta has no model_config
    raise InputError(f"{what} {path} holds no Transformer model this tool can read "
                     f"(its saved meta has no {e})") from None
  except Exception as e:  # pylint: disable=broad-except  (any unreadable checkpoint)
    detail = str(e).splitlines()[0] if str(e) else type(e).__name__
    raise InputError(f"cannot load {what} {path}: {detail}") from None
  if not tokenizer_dir:
    raise InputError(f"{what} {path} has no vocab.txt / tokenizer.json")
  try:
    if config.family == "modernbert":  # its tokenizer.json as saved (BPE), else WordPiece
      tokenizer = modernbert.load_tokenizer(tokenizer_dir)
    elif kind != "bert" and not (paths.resolve(tokenizer_dir) / "vocab.txt").exists():
      # GPT's byte-level BPE, translation's shared BPE: their tokenizer.json as saved
      tokenizer = gpt2.load_gpt2_tokenizer(tokenizer_dir)
    else:
      tokenizer = load_tokenizer(tokenizer_dir)  # WordPiece: [CLS] / [SEP] / [MASK]
  except (OSError, ValueError) as e:
    raise InputError(f"{what} {path}: {e}") from None
  return Loaded(kind, config, params, tokenizer, task, path)

