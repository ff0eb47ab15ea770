"""Hugging Face ModernBERT directories -> our ModernBERT (models/modernbert.py): config.json,
tensor names and layouts, loading, the tokenizer. Saving: modernbert_save.py.

A directory holds config.json (model_type "modernbert"), model.safetensors (float32 or
bfloat16, read by hf_load.read_safetensors: numpy only) and tokenizer.json (ModernBERT's
byte-level BPE). Our param names mirror transformers' modeling_modernbert.py, so a tensor's
name is its path with `layers_i` for `layers.i` and weight for kernel / scale / embedding:
  model.layers.i.attn.Wqkv.weight [3*H*D, hidden] -> model/layers_i/attn/Wqkv/kernel
      [hidden, 3, H, D];  its bias [3*H*D] -> [3, H, D]
  model.layers.i.attn.Wo.weight [hidden, H*D]     -> .../attn/Wo/kernel [H, D, hidden]
  model.layers.i.mlp.Wi.weight [2*I, hidden]      -> .../mlp/Wi/kernel [hidden, 2, I]
  any other Linear weight [out, in]               -> kernel [in, out]
  decoder.bias                                    -> decoder_bias
ForMaskedLM / For{Sequence,Token}Classification checkpoints hold the encoder under
`model.`, a bare ModernBertModel save without it: both load. The MLM decoder is the token
table (tied): a decoder.weight that differs from it is refused.
"""
from __future__ import annotations

from collections.abc import Mapping
import math
import re

from absl import logging
from flax import traverse_util
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.interop import hf_config
from bert_jax.interop import hf_layout as layout
from bert_jax.interop import hf_load
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.param_layout import pad_rows
from bert_jax.runtime import paths

# Our trees (models/modernbert.py) -> transformers' class.
MODELS = {"encoder": "ModernBertModel", "masked_lm": "ModernBertForMaskedLM",
          "sequence_classification": "ModernBertForSequenceClassification",
          "token_classification": "ModernBertForTokenClassification"}
# Top-level modules a masked_lm tree may lack (a bare ModernBertModel checkpoint).
MLM_HEADS = ("head", "decoder_bias")
_DECODER_W = "decoder.weight"
_VOCAB_ROWS = ("tok_embeddings/embedding", "decoder_bias")
_ENCODER = ("embeddings.", "layers.", "final_norm.")   # a bare ModernBertModel's names
# transformers' ModernBertConfig defaults, for fields a config.json leaves out.
DEFAULTS = dict(max_position_embeddings=8192, hidden_activation="gelu", norm_eps=1e-5,
                norm_bias=False, attention_bias=False, mlp_bias=False, classifier_bias=False,
                decoder_bias=True, global_rope_theta=160000.0, local_rope_theta=10000.0,
                local_attention=128, global_attn_every_n_layers=3, classifier_pooling="cls",
                embedding_dropout=0.0, mlp_dropout=0.0, attention_dropout=0.0,
                initializer_range=0.02)
_INTS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
         "num_attention_heads", "max_position_embeddings", "local_attention",
         "global_attn_every_n_layers")


def is_modernbert_dir(path: str) -> bool:
  """A directory (or its config.json) whose config.json says model_type "modernbert"."""
  where = paths.resolve(path)
  where = where / "config.json" if where.is_dir() else where
  if where.name != "config.json" or not where.is_file():
    return False
  try:
    return hf_config.read_config_json(str(where))[1].get("model_type") == "modernbert"
  except ValueError:  # unreadable: the BERT loader names the problem
    return False


# --------------------------------------------------------------------------- config.json
def load_modernbert_config(path: str, **overrides) -> TransformerConfig:
  """A transformers ModernBERT config.json (or its directory) -> TransformerConfig; one
  ValueError line for a field our ModernBERT cannot run."""
  where, hf = hf_config.read_config_json(path)
  if hf.get("model_type") != "modernbert":
    raise ValueError(f"{where}: model_type {hf.get('model_type')!r} is not 'modernbert'.")
  if "local_rope_theta" in hf and hf["local_rope_theta"] is None:  # transformers: global's
    hf = dict(hf, local_rope_theta=hf.get("global_rope_theta"))
  hf = dict(DEFAULTS, **{k: v for k, v in hf.items() if v is not None})
  for key in _INTS:
    if not isinstance(hf.get(key), int) or isinstance(hf[key], bool) or hf[key] <= 0:
      raise ValueError(f"{where}: {key} must be a positive integer, got {hf.get(key)!r}.")
  act = hf["hidden_activation"]
  acts = hf_config._FROM_HF_ACT  # pylint: disable=protected-access
  if act not in acts:
    raise ValueError(f"{where}: hidden_activation {act!r} is not supported; expected one "
                     f"of {sorted(acts)}.")
  head_act = hf.get("classifier_activation", "gelu")
  if acts.get(head_act) != acts[act]:
    raise ValueError(f"{where}: classifier_activation {head_act!r} differs from "
                     f"hidden_activation {act!r}; our prediction head uses the model's.")
  if hf.get("rope_scaling"):
    raise ValueError(f"{where}: rope_scaling {hf['rope_scaling']!r} is not supported.")
  if hf["classifier_pooling"] not in ("cls", "mean"):
    raise ValueError(f"{where}: classifier_pooling {hf['classifier_pooling']!r}; expected "
                     "'cls' or 'mean'.")
  fields = dict(
      family="modernbert", position="rotary", pre_ln=True, type_vocab_size=0, init="bert",
      vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
      mlp_dim=hf["intermediate_size"], num_layers=hf["num_hidden_layers"],
      num_heads=hf["num_attention_heads"], max_len=hf["max_position_embeddings"],
      layer_norm_eps=hf["norm_eps"], norm_bias=bool(hf["norm_bias"]),
      use_bias=bool(hf["attention_bias"]), mlp_bias=bool(hf["mlp_bias"]),
      head_bias=bool(hf["classifier_bias"]), decoder_bias=bool(hf["decoder_bias"]),
      rotary_base=float(hf["global_rope_theta"]),
      local_rotary_base=float(hf["local_rope_theta"]),
      local_window=hf["local_attention"], global_every=hf["global_attn_every_n_layers"],
      activation=acts[act],
      pooling=hf["classifier_pooling"],
      # One rate for both: the embeddings' and the FFN's (ModernBERT's are both 0).
      dropout_rate=float(max(hf["embedding_dropout"], hf["mlp_dropout"])),
      attention_dropout_rate=float(hf["attention_dropout"]),
      init_std=float(hf["initializer_range"]))
  fields.update(overrides)
  try:
    return TransformerConfig(**fields)
  except ValueError as e:  # e.g. hidden_size not divisible by the heads
    raise ValueError(f"{where}: {e}") from None


# ---------------------------------------------------------------------- names, layouts
def _module(config: TransformerConfig, model: str, num_labels: int):
  from bert_jax.models import modernbert  # pylint: disable=g-import-not-at-top
  if model not in MODELS:
    raise ValueError(f"model={model!r}; expected one of {tuple(MODELS)}.")
  config = config.replace(scan_layers=False)
  if model == "encoder":
    return modernbert.ModernBertModel(config)
  if model == "masked_lm":
    return modernbert.ModernBertForMaskedLM(config)
  if model == "sequence_classification":
    return modernbert.ModernBertForSequenceClassification(config, num_labels)
  return modernbert.ModernBertForTokenClassification(config, num_labels)


def expected_shapes(config: TransformerConfig, model: str,
                    num_labels: int = 2) -> dict[str, tuple]:
  """Our flat path -> shape of `model`'s tree, traced (nothing allocated)."""
  module = _module(config, model, num_labels)
  ids = jnp.zeros((1, 8), jnp.int32)
  tree = jax.eval_shape(lambda: module.init(jax.random.key(0), ids, jnp.ones_like(ids)))
  flat = traverse_util.flatten_dict(nn.meta.unbox(tree["params"]), sep="/")
  return {p: tuple(v.shape) for p, v in flat.items()}


def hf_name(path: str) -> str:
  """transformers' tensor name of our flat path (an encoder tree's are a bare
  ModernBertModel's, the others' under `model.`)."""
  *parents, leaf = path.split("/")
  if not parents and leaf == "decoder_bias":
    return "decoder.bias"
  parents = [re.sub(r"^layers_(\d+)$", r"layers.\1", p) for p in parents]
  return ".".join(parents + ["bias" if leaf == "bias" else "weight"])


def _inputs_of(path: str) -> int:
  """The leading axes of a kernel that are its inputs (attn/Wo: heads and head_dim)."""
  return 2 if path.endswith("attn/Wo/kernel") else 1


def hf_shape(path: str, shape: tuple) -> tuple:
  if path.endswith("/kernel"):
    k = _inputs_of(path)
    return (math.prod(shape[k:]), math.prod(shape[:k]))  # [out, in]
  return (math.prod(shape),) if path.endswith("/bias") else tuple(shape)


def to_ours(path: str, x: np.ndarray, shape: tuple) -> np.ndarray:
  x = x.T if path.endswith("/kernel") else x
  return np.ascontiguousarray(x.reshape(shape))


def to_hf(path: str, x: np.ndarray) -> np.ndarray:
  if path.endswith("/kernel"):
    return np.ascontiguousarray(x.reshape(math.prod(x.shape[:_inputs_of(path)]), -1).T)
  return x.reshape(-1) if path.endswith("/bias") else x


def is_vocab_rows(path: str) -> bool:
  return path.endswith(_VOCAB_ROWS)


# ----------------------------------------------------------------------------- loading
def _canonical(tensors: Mapping[str, np.ndarray], model: str, source: str) -> dict:
  """The names of `model`'s checkpoint: `model.` added to a bare encoder's (or, for an
  encoder, taken off, with every head tensor dropped); the tied decoder.weight checked."""
  out = {}
  for name, value in tensors.items():
    if name.startswith(_ENCODER):
      name = "model." + name
    if name in out:
      raise ValueError(f"{source}: tensor {name} appears twice (with and without the "
                       "`model.` prefix).")
    out[name] = value
  decoder = out.pop(_DECODER_W, None)
  table = out.get("model.embeddings.tok_embeddings.weight")
  if decoder is not None and table is not None and not np.array_equal(decoder, table):
    raise ValueError(f"{source}: {_DECODER_W} differs from the token embeddings: an untied "
                     "MLM decoder cannot be loaded (ours is the token table).")
  if model == "encoder":
    heads = sorted({k.split(".")[0] for k in out if not k.startswith("model.")})
    if heads:
      logging.info("%s: ignoring the non-encoder tensors under %s", source, ", ".join(heads))
    out = {k[len("model."):]: v for k, v in out.items() if k.startswith("model.")}
  return out


def _listed(names: list[str]) -> str:
  return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def hf_to_params(tensors: Mapping[str, np.ndarray], config: TransformerConfig, *,
                 model: str = "masked_lm", allow_missing_heads: bool = False,
                 drop_missing_heads: bool = False, seed: int = 0,
                 source: str = "checkpoint") -> dict:
  """transformers ModernBERT tensors -> our tree of `model` (nested dict of numpy in the
  params dtype). One ValueError line names the missing, unexpected and mis-shaped
  tensors. A masked_lm tree from a checkpoint without the MLM head (a bare
  ModernBertModel) gets a fresh head with `allow_missing_heads`, none with
  `drop_missing_heads`; classification trees take num_labels from classifier.bias."""
  tensors = _canonical(tensors, model, source)
  classes = tensors.get("classifier.bias")
  num_labels = int(classes.shape[0]) if classes is not None and classes.ndim == 1 else 2
  expected = expected_shapes(config, model, num_labels)
  missing, shaped, flat = [], [], {}
  for path, shape in expected.items():
    name = hf_name(path)
    ours = (config.vocab_size,) + shape[1:] if is_vocab_rows(path) else shape
    want = hf_shape(path, ours)
    if name not in tensors:
      missing.append(path)
    elif tuple(tensors[name].shape) != want:
      shaped.append(f"{name} {tuple(tensors[name].shape)} (expected {want})")
    else:
      flat[path] = pad_rows(to_ours(path, tensors[name], ours), shape[0])
  unexpected = sorted(set(tensors) - {hf_name(p) for p in expected})
  heads = [p for p in missing if model == "masked_lm" and p.split("/")[0] in MLM_HEADS]
  fatal = [hf_name(p) for p in missing
           if p not in heads or not (allow_missing_heads or drop_missing_heads)]
  if fatal or unexpected or shaped:
    problems = [f"missing {_listed(fatal)}"] if fatal else []
    problems += [f"unexpected {_listed(unexpected)}"] if unexpected else []
    problems += [f"mis-shaped {_listed(shaped)}"] if shaped else []
    if fatal and len(fatal) == len(heads) and not unexpected and not shaped:
      problems.append("only the MLM head: allow_missing_heads=True makes a fresh one")
    raise ValueError(f"{source} does not match the ModernBERT {model} of its config.json: "
                     + "; ".join(problems))
  if heads and allow_missing_heads:
    logging.warning("%s has no MLM head: %d tensors freshly initialized.", source, len(heads))
    flat.update(layout.fresh_params({p: expected[p] for p in heads}, config.init_std, seed))
  dtype = config.params_dtype
  return layout.unflatten({p: np.asarray(v, dtype=dtype) for p, v in flat.items()})


def model_of(tensors: Mapping[str, np.ndarray]) -> str:
  """The richest tree an inference reader draws from these tensors: masked_lm when they
  hold the MLM head (and no classifier), else the encoder alone."""
  if "classifier.weight" in tensors or not any(k.startswith("head.") for k in tensors):
    return "encoder"
  return "masked_lm"


def load_modernbert(path: str, *, model: str = "masked_lm", allow_missing_heads: bool = False,
                    drop_missing_heads: bool = False, seed: int = 0, **config_overrides):
  """A transformers ModernBERT directory -> (TransformerConfig, params of `model`: one of
  MODELS). config_overrides: TransformerConfig fields, e.g. deterministic=True,
  param_dtype="bfloat16" (the params are cast to it)."""
  config = load_modernbert_config(path, **config_overrides)
  params = hf_to_params(hf_load.read_safetensors(path), config, model=model,
                        allow_missing_heads=allow_missing_heads,
                        drop_missing_heads=drop_missing_heads, seed=seed, source=path)
  return config, params


# --------------------------------------------------------------------------- tokenizer
_NEEDED = ("[CLS]", "[SEP]", "[MASK]")   # what encode / fill-mask put in or look for


def load_tokenizer(path: str):
  """The tokenizers.Tokenizer of a ModernBERT directory: its tokenizer.json as saved (a
  byte-level BPE: no WordPiece pipeline forced on it), never padding or truncating; a
  WordPiece one (a model trained here) through data/tokenizer.py, as BERT's."""
  from tokenizers import Tokenizer, models  # pylint: disable=g-import-not-at-top
  from bert_jax.data import tokenizer as wordpiece  # pylint: disable=g-import-not-at-top
  directory = paths.resolve(path)
  file = directory / "tokenizer.json"
  if not file.exists():
    if (directory / "vocab.txt").exists():
      return wordpiece.load_tokenizer(path)
    raise FileNotFoundError(f"No tokenizer.json in {path}.")
  try:
    tok = Tokenizer.from_str(file.read_bytes().decode("utf-8"))
  except Exception as e:  # pylint: disable=broad-except  (tokenizers raises bare Exception)
    raise ValueError(f"{file} is not a readable tokenizer.json: {str(e)[:200]}") from None
  if isinstance(tok.model, models.WordPiece):
    return wordpiece.load_tokenizer(path)
  tok.no_padding()
  tok.no_truncation()
  missing = [t for t in _NEEDED if tok.token_to_id(t) is None]
  if missing:
    raise ValueError(f"{file} lacks the special token(s) {', '.join(missing)}.")
  if (directory / "config.json").exists():  # the model's own ids, if it names them
    _, hf = hf_config.read_config_json(path)
    for key, token in (("cls_token_id", "[CLS]"), ("sep_token_id", "[SEP]")):
      if isinstance(hf.get(key), int) and hf[key] != tok.token_to_id(token):
        raise ValueError(f"{file}: {token} is id {tok.token_to_id(token)} but config.json's "
                         f"{key} is {hf[key]}: the tokenizer is not this model's.")
  return tok
