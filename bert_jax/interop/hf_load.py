"""Loading Hugging Face BERT checkpoints into our param trees, with numpy (and ml_dtypes for bfloat16) only.

An HF BERT directory holds config.json + model.safetensors (+ vocab.txt / tokenizer.json).
Accepted layouts: saved from BertForPreTraining (`bert.` prefix + `cls.` heads) or BertModel
(no prefix, no heads), by transformers 4.x or 5.x (same tensor names), old TF-converted
`LayerNorm.gamma/beta` names, the tied `cls.predictions.decoder.weight` present or not,
sharded (`model.safetensors.index.json`). Torch pickles (pytorch_model.bin) are refused.
An untied decoder weight cannot be represented (our MLM head reads the token embeddings),
so a checkpoint whose `cls.predictions.decoder.weight` differs from them is an error.
Where each tensor goes: hf_layout.py; config.json: hf_config.py; saving: hf_save.py.
"""
from __future__ import annotations

import json

from absl import logging
import numpy as np
import ml_dtypes

from bert_jax.runtime import paths
from bert_jax.interop import hf_layout as layout
from bert_jax.interop.hf_config import load_hf_config
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.param_layout import pad_rows

_BUFFERS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")
_DECODER_W, _DECODER_B = "cls.predictions.decoder.weight", "cls.predictions.decoder.bias"
_MLM_BIAS = layout.MLM_BIAS
MODELS = ("pretraining", "encoder")


# safetensors dtype codes; BF16 through ml_dtypes, which safetensors.numpy cannot make.
_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
           "BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn,
           "F8_E5M2": ml_dtypes.float8_e5m2, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32,
           "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_}


def _entry(name: str, info) -> tuple:
  """(dtype, shape, begin, stop) of a header entry; ValueError naming what is wrong."""
  if not isinstance(info, dict) or info.get("dtype") not in _DTYPES:
    raise ValueError(f"tensor {name!r}: dtype "
                     f"{info.get('dtype') if isinstance(info, dict) else info!r} unknown")
  shape, offsets = info.get("shape"), info.get("data_offsets")
  if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
    raise ValueError(f"tensor {name!r}: shape {shape!r} is not a list of sizes")
  if not (isinstance(offsets, list) and len(offsets) == 2 and
          all(type(o) is int for o in offsets) and 0 <= offsets[0] <= offsets[1]):
    raise ValueError(f"tensor {name!r}: data_offsets {offsets!r} are not two byte offsets")
  return np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<"), shape, *offsets


def load_safetensors(data: bytes, where: str) -> dict[str, np.ndarray]:
  """The tensors of one safetensors file's bytes (float32, float16 and bfloat16 among
  them: the model casts them to its params dtype). A truncated or garbled file is one
  ValueError naming it, never a KeyError or SafetensorError traceback."""
  def bad(why: str) -> ValueError:
    return ValueError(f"{where} is not a readable safetensors file ({why}): the file is "
                      "truncated or damaged; copy or download it again.")
  if len(data) < 8:
    raise bad(f"{len(data)} bytes")
  size = int.from_bytes(data[:8], "little")
  if size > len(data) - 8:
    raise bad(f"a header of {size} bytes in a file of {len(data)}")
  try:
    header = json.loads(data[8:8 + size].decode("utf-8"))
  except (UnicodeDecodeError, ValueError) as e:
    raise bad(f"its header is not JSON: {e}") from None
  if not isinstance(header, dict):
    raise bad("its header is not a JSON object")
  try:
    entries = sorted(((_entry(k, v), k) for k, v in header.items() if k != "__metadata__"),
                     key=lambda e: (e[0][2], e[0][3], e[1]))
  except ValueError as e:
    raise bad(str(e)) from None
  body, tensors, end = memoryview(data)[8 + size:], {}, 0
  for (dtype, shape, begin, stop), name in entries:
    count = int(np.prod(shape, dtype=np.int64))
    if begin != end or stop - begin != count * np.dtype(dtype).itemsize or stop > len(body):
      raise bad(f"tensor {name!r} at bytes {begin}-{stop} of {len(body)}")
    tensors[name] = np.frombuffer(body[begin:stop], dtype=dtype).reshape(shape).copy()
    end = stop
  if end != len(body):
    raise bad(f"{len(body) - end} bytes after the last tensor")
  return tensors


def read_safetensors(path: str) -> dict[str, np.ndarray]:
  """All tensors of an HF directory (single file or sharded) as numpy arrays.

  Files are read through epath into memory (local or gs://): safetensors' load_file
  memory-maps local paths only, and the arrays are copied out either way."""
  directory = paths.resolve(path)
  index = directory / "model.safetensors.index.json"
  single = directory / "model.safetensors"
  if single.exists():
    return load_safetensors(single.read_bytes(), str(single))
  if index.exists():
    try:
      weight_map = json.loads(index.read_bytes().decode("utf-8"))["weight_map"]
      shards = sorted(set(weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
      raise ValueError(f"{index} is not a safetensors index (a JSON with a weight_map): "
                       f"{type(e).__name__}: {str(e)[:200]}") from None
    tensors = {}
    for shard in shards:
      if not (directory / shard).exists():
        raise FileNotFoundError(f"{directory / shard}, named by {index.name}, is missing.")
      tensors.update(load_safetensors((directory / shard).read_bytes(), str(directory / shard)))
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
    ours = expected[path]
    if layout.is_vocab_rows(path):  # HF holds the tokenizer's rows; ours may be padded
      ours = (config.vocab_size,) + tuple(ours[1:])
    want = layout.hf_shape(kind, ours)
    if hf_name not in tensors:
      missing.append((path, hf_name))
    elif tuple(tensors[hf_name].shape) != want:
      shaped.append(f"{hf_name}: {tuple(tensors[hf_name].shape)} (expected {want})")
    else:
      flat[path] = pad_rows(layout.to_ours(kind, tensors[hf_name], ours), expected[path][0])
  unexpected = sorted(set(tensors) - {hf for hf, _ in table.values()})
  head_missing = [p for p, _ in missing if layout.head_of(p) in layout.PRETRAINING_HEADS]
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

