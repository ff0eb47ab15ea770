"""Hugging Face GPT-2 checkpoints <-> our GPT param trees, with safetensors and numpy only.

A GPT-2 directory holds config.json + model.safetensors and the tokenizer as vocab.json +
merges.txt (byte-level BPE) or tokenizer.json. Tensors saved from GPT2LMHeadModel carry a
`transformer.` prefix (the tied `lm_head.weight` usually left out); those saved from
GPT2Model (the original openai-community/gpt2 file) have none and may hold the
`attn.bias` / `attn.masked_bias` causal-mask buffers, which are dropped.

Name mapping (GPT-2's Conv1D weights are [in, out], like our kernels, not [out, in]):
  wte / wpe                         -> token_embedder/embedding, position_embedder/embedding/embedding
  h.i.ln_1 / h.i.ln_2               -> decoder/layers_i/self_attention_norm / mlp_norm
  h.i.attn.c_attn  weight [d, 3d]   -> self_attention/{query,key,value}/kernel [d, heads, d_k]
                   bias [3d]        -> .../bias [heads, d_k]  (q, k, v in that order)
  h.i.attn.c_proj  weight [d, d]    -> self_attention/out/kernel [heads, d_k, d]
  h.i.mlp.c_fc / c_proj             -> mlp/wi / mlp/wo
  ln_f                              -> decoder/final_norm
An untied lm_head cannot be represented (our logits read the token embeddings): a
checkpoint whose lm_head.weight differs from wte is an error.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np
import safetensors.numpy

from bert_jax.runtime import paths
from bert_jax.interop.hf_config import read_config_json
from bert_jax.interop.hf_load import read_safetensors
from bert_jax.layers.config import TransformerConfig
from bert_jax.models.variants import get_model_config

_FROM_HF_ACT = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
                "relu": "relu"}
_TO_HF_ACT = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
_PREFIX = "transformer."
_LM_HEAD = "lm_head.weight"
EOT = "<|endoftext|>"


# ---------------------------------------------------------------------------- config
def load_gpt2_config(path: str, **overrides) -> TransformerConfig:
  """A GPT-2 config.json (or its directory) -> TransformerConfig; refuses other models."""
  config_path, hf = read_config_json(path)
  if hf.get("model_type") != "gpt2":
    raise ValueError(f"{config_path}: model_type {hf.get('model_type')!r} is not 'gpt2'; "
                     "only GPT-2 checkpoints load as a GPT.")
  act = hf.get("activation_function", "gelu_new")
  if act not in _FROM_HF_ACT:
    raise ValueError(f"{config_path}: activation_function {act!r} is not supported; "
                     f"expected one of {sorted(_FROM_HF_ACT)}.")
  for key, ok in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                  ("add_cross_attention", False)):
    if hf.get(key, ok) != ok:
      raise ValueError(f"{config_path}: {key}={hf[key]} is not supported (only {ok}).")
  d = hf["n_embd"]
  fields = dict(vocab_size=hf["vocab_size"], hidden_size=d, num_layers=hf["n_layer"],
                num_heads=hf["n_head"], mlp_dim=hf.get("n_inner") or 4 * d,
                max_len=hf["n_positions"], layer_norm_eps=hf.get("layer_norm_epsilon", 1e-5),
                activation=_FROM_HF_ACT[act], dropout_rate=hf.get("resid_pdrop", 0.1),
                attention_dropout_rate=hf.get("attn_pdrop", 0.1),
                init_std=hf.get("initializer_range", 0.02))
  fields.update(overrides)
  return get_model_config("gpt/small", **fields)


def gpt2_config_dict(config: TransformerConfig, eos_token_id: int | None = None) -> dict:
  """Our GPT config -> a GPT-2 config.json dict (GPT2LMHeadModel)."""
  if config.position != "learned" or not config.pre_ln or config.type_vocab_size:
    raise ValueError("only a GPT-2 shaped model (pre-LN, learned positions, no token types) "
                     "can be saved in the GPT-2 layout.")
  out = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
         "vocab_size": config.vocab_size, "n_embd": config.hidden_size,
         "n_layer": config.num_layers, "n_head": config.num_heads, "n_inner": config.d_mlp,
         "n_positions": config.max_len, "n_ctx": config.max_len,
         "activation_function": _TO_HF_ACT[config.activation],
         "layer_norm_epsilon": config.layer_norm_eps, "resid_pdrop": config.dropout_rate,
         "embd_pdrop": config.dropout_rate, "attn_pdrop": config.attention_dropout_rate,
         "initializer_range": config.init_std, "scale_attn_weights": True,
         "tie_word_embeddings": True, "torch_dtype": config.param_dtype}
  if eos_token_id is not None:
    out.update(bos_token_id=eos_token_id, eos_token_id=eos_token_id)
  return out


# ---------------------------------------------------------------------------- tensors
def _canonical(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """GPT2Model names (no prefix), causal-mask buffers dropped, a tied lm_head folded."""
  out = {}
  for name, value in tensors.items():
    if name.endswith((".attn.bias", ".attn.masked_bias")):
      continue  # the causal-mask buffers of old checkpoints, not weights
    if name != _LM_HEAD and name.startswith(_PREFIX):
      name = name[len(_PREFIX):]
    if name in out:
      raise ValueError(f"Tensor {name} appears twice in the checkpoint (under two names).")
    out[name] = value
  head = out.pop(_LM_HEAD, None)
  if head is not None and "wte.weight" in out and not np.array_equal(head, out["wte.weight"]):
    raise ValueError("lm_head.weight differs from wte.weight: an untied output layer cannot "
                     "be loaded (our GPT's logits read the token embeddings).")
  return out


def _expected(config: TransformerConfig) -> dict[str, tuple]:
  d, f = config.hidden_size, config.d_mlp
  shapes = {"wte.weight": (config.vocab_size, d), "wpe.weight": (config.max_len, d),
            "ln_f.weight": (d,), "ln_f.bias": (d,)}
  for i in range(config.num_layers):
    p = f"h.{i}."
    shapes.update({p + "ln_1.weight": (d,), p + "ln_1.bias": (d,), p + "ln_2.weight": (d,),
                   p + "ln_2.bias": (d,), p + "attn.c_attn.weight": (d, 3 * d),
                   p + "attn.c_attn.bias": (3 * d,), p + "attn.c_proj.weight": (d, d),
                   p + "attn.c_proj.bias": (d,), p + "mlp.c_fc.weight": (d, f),
                   p + "mlp.c_fc.bias": (f,), p + "mlp.c_proj.weight": (f, d),
                   p + "mlp.c_proj.bias": (d,)})
  return shapes


def _check(tensors: dict[str, np.ndarray], config: TransformerConfig, where: str) -> None:
  want = _expected(config)
  missing = sorted(set(want) - set(tensors))
  unexpected = sorted(set(tensors) - set(want))
  if missing or unexpected:
    raise ValueError(f"{where} is not a GPT-2 checkpoint of this config: missing "
                     f"{missing[:6]}{'...' if len(missing) > 6 else ''}, unexpected "
                     f"{unexpected[:6]}{'...' if len(unexpected) > 6 else ''}.")
  bad = [(k, tuple(tensors[k].shape), s) for k, s in want.items() if tuple(tensors[k].shape) != s]
  if bad:
    raise ValueError(f"{where}: tensor shapes disagree with config.json: "
                     + "; ".join(f"{k} {got} != {s}" for k, got, s in bad[:6]))


def gpt2_to_params(tensors: dict[str, np.ndarray], config: TransformerConfig,
                   where: str = "the checkpoint") -> dict:
  """GPT-2 tensors (either naming) -> our GPT params (unrolled `layers_i`, float32 numpy)."""
  t = {k: np.asarray(v, np.float32) for k, v in _canonical(tensors).items()}
  _check(t, config, where)
  d, h, dk = config.hidden_size, config.num_heads, config.d_head
  norm = lambda p: {"scale": t[p + ".weight"], "bias": t[p + ".bias"]}
  decoder = {"final_norm": norm("ln_f")}
  for i in range(config.num_layers):
    p = f"h.{i}."
    w, b = t[p + "attn.c_attn.weight"], t[p + "attn.c_attn.bias"]   # [d, 3d], [3d]
    attn = {name: {"kernel": w[:, j * d:(j + 1) * d].reshape(d, h, dk),
                   "bias": b[j * d:(j + 1) * d].reshape(h, dk)}
            for j, name in enumerate(("query", "key", "value"))}
    attn["out"] = {"kernel": t[p + "attn.c_proj.weight"].reshape(h, dk, d),
                   "bias": t[p + "attn.c_proj.bias"]}
    decoder[f"layers_{i}"] = {
        "self_attention_norm": norm(p + "ln_1"), "self_attention": attn,
        "mlp_norm": norm(p + "ln_2"),
        "mlp": {"wi": {"kernel": t[p + "mlp.c_fc.weight"], "bias": t[p + "mlp.c_fc.bias"]},
                "wo": {"kernel": t[p + "mlp.c_proj.weight"], "bias": t[p + "mlp.c_proj.bias"]}}}
  return {"token_embedder": {"embedding": t["wte.weight"]},
          "position_embedder": {"embedding": {"embedding": t["wpe.weight"]}},
          "decoder": decoder}


def params_to_gpt2(config: TransformerConfig, params: Any) -> dict[str, np.ndarray]:
  """Our GPT params (scanned or unrolled) -> GPT2LMHeadModel tensors (`transformer.` names)."""
  from bert_jax.layers.param_layout import scan_to_unrolled  # pylint: disable=g-import-not-at-top
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  p = scan_to_unrolled(_to_numpy(nn.unbox(params)))
  d = config.hidden_size
  out = {"wte.weight": p["token_embedder"]["embedding"][:config.vocab_size],  # no padding
         "wpe.weight": p["position_embedder"]["embedding"]["embedding"],
         "ln_f.weight": p["decoder"]["final_norm"]["scale"],
         "ln_f.bias": p["decoder"]["final_norm"]["bias"]}
  for i in range(config.num_layers):
    layer, pre = p["decoder"][f"layers_{i}"], f"h.{i}."
    attn = layer["self_attention"]
    qkv = ("query", "key", "value")
    out.update({
        pre + "ln_1.weight": layer["self_attention_norm"]["scale"],
        pre + "ln_1.bias": layer["self_attention_norm"]["bias"],
        pre + "attn.c_attn.weight": np.concatenate(
            [attn[n]["kernel"].reshape(d, -1) for n in qkv], axis=1),
        pre + "attn.c_attn.bias": np.concatenate([attn[n]["bias"].reshape(-1) for n in qkv]),
        pre + "attn.c_proj.weight": attn["out"]["kernel"].reshape(-1, d),
        pre + "attn.c_proj.bias": attn["out"]["bias"],
        pre + "ln_2.weight": layer["mlp_norm"]["scale"],
        pre + "ln_2.bias": layer["mlp_norm"]["bias"],
        pre + "mlp.c_fc.weight": layer["mlp"]["wi"]["kernel"],
        pre + "mlp.c_fc.bias": layer["mlp"]["wi"]["bias"],
        pre + "mlp.c_proj.weight": layer["mlp"]["wo"]["kernel"],
        pre + "mlp.c_proj.bias": layer["mlp"]["wo"]["bias"]})
  return {_PREFIX + k: np.ascontiguousarray(v) for k, v in out.items()}


def _to_numpy(tree):
  import jax  # pylint: disable=g-import-not-at-top
  return jax.tree_util.tree_map(lambda x: np.asarray(jax.device_get(x)), tree)


# ------------------------------------------------------------------------- directories
def load_gpt2(path: str, scan_layers: bool = False) -> tuple[TransformerConfig, dict]:
  """(config, params) of a GPT-2 directory; params unrolled unless scan_layers."""
  config = load_gpt2_config(path, scan_layers=scan_layers)
  params = gpt2_to_params(read_safetensors(path), config, where=path)
  if scan_layers:
    from bert_jax.layers.param_layout import unrolled_to_scan  # pylint: disable=g-import-not-at-top
    params = unrolled_to_scan(params)
  return config, params


def save_gpt2(path: str, config: TransformerConfig, params: Any, tokenizer=None) -> None:
  """Writes config.json + model.safetensors (+ tokenizer.json, tokenizer_config.json) in
  GPT2LMHeadModel's layout.

  The tied lm_head is left out, as transformers' save_pretrained does.
  """
  eot = tokenizer.token_to_id(EOT) if tokenizer is not None else None
  hf_config, tensors = gpt2_config_dict(config, eot), params_to_gpt2(config, params)
  directory = paths.resolve(path)  # local or gs://
  directory.mkdir(parents=True, exist_ok=True)  # after every check: nothing half-written
  paths.write_atomically(directory / "model.safetensors",
                         safetensors.numpy.save(tensors, metadata={"format": "pt"}))
  if tokenizer is not None:
    paths.write_atomically(directory / "tokenizer.json", tokenizer.to_str(pretty=True))
    # AutoTokenizer's settings: the context length (truncation), the one special token.
    tok_config = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": config.max_len}
    if eot is not None:
      tok_config.update(bos_token=EOT, eos_token=EOT, unk_token=EOT)
    paths.write_atomically(directory / "tokenizer_config.json",
                           json.dumps(tok_config, indent=2))
  # Last: a directory with a config.json holds a whole model (export's check relies on it).
  paths.write_atomically(directory / "config.json", json.dumps(hf_config, indent=2))


def load_gpt2_tokenizer(path: str):
  """A byte-level BPE `tokenizers.Tokenizer` from tokenizer.json or vocab.json + merges.txt.

  `path` is a directory holding either, or a tokenizer.json file itself.
  """
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # pylint: disable=g-import-not-at-top
  where = paths.resolve(path)  # local or gs://, read through epath
  if where.is_file():
    if not path.endswith(".json"):
      raise ValueError(f"{path}: unknown tokenizer file; expected a tokenizer.json, or a "
                       "directory with tokenizer.json or vocab.json + merges.txt.")
    try:
      return Tokenizer.from_str(where.read_bytes().decode("utf-8"))
    except Exception as e:  # tokenizers raises a bare Exception on a malformed file
      raise ValueError(f"{path} is not a readable tokenizer.json: {e}") from e
  if (where / "tokenizer.json").exists():
    return load_gpt2_tokenizer(os.fspath(where / "tokenizer.json"))
  vocab, merges = where / "vocab.json", where / "merges.txt"
  if vocab.exists() and merges.exists():
    with tempfile.TemporaryDirectory() as tmp:  # BPE.from_file parses local files only
      local = [os.path.join(tmp, f.name) for f in (vocab, merges)]
      for src, dst in zip((vocab, merges), local):
        with open(dst, "wb") as f:
          f.write(src.read_bytes())
      tok = Tokenizer(models.BPE.from_file(*local))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok
  present = sorted(p.name for p in where.iterdir()) if where.is_dir() else []
  raise FileNotFoundError(f"No GPT-2 tokenizer in {path} (need tokenizer.json, or vocab.json "
                          f"+ merges.txt); found {present}.")
