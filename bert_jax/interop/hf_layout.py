"""Where each tensor of an HF BERT checkpoint lives in our param tree, and in what layout.

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

Also the flat-path helpers shared by loading and saving: our trees are handled as
`{"bert/encoder/layers_0/attention/query/kernel": array}` dicts, unrolled; the scanned
layout (`encoder/layers/...: [L, ...]`) is converted at the edges.
"""
from __future__ import annotations

from collections.abc import Mapping
import re
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from bert_jax.layers.config import TransformerConfig
from bert_jax.models import bert, heads

MLM_BIAS = "cls.predictions.bias"
# Fine-tuned models: ours (models/heads.py) -> (transformers class, has the pooler, the
# head's name: the same in both trees, `classifier` / `qa_outputs` beside `bert`).
HEAD_MODELS = {
    "sequence_classification": ("BertForSequenceClassification", True, "classifier"),
    "token_classification": ("BertForTokenClassification", False, "classifier"),
    "question_answering": ("BertForQuestionAnswering", False, "qa_outputs"),
}
MODELS = ("pretraining", "encoder", *HEAD_MODELS)
# Top-level modules of a pretraining tree that a checkpoint may lack (BertModel,
# BertForMaskedLM): loading may initialize them freshly, saving may leave them out.
PRETRAINING_HEADS = ("pooler", "mlm_head", "nsp_head")


# ------------------------------------------------------------------- name table, layouts
def hf_name_table(config: TransformerConfig, model: str) -> dict[str, tuple[str, str]]:
  """Our flat param path -> (HF name in BertForPreTraining form, layout kind).

  Kinds: copy; dense ([out, in] -> [in, out]); qkv / qkv_bias (split heads); out
  (merge heads). `model="encoder"` paths have no `bert/` prefix and no MLM/NSP heads;
  a HEAD_MODELS model has its head (and the pooler only if transformers' class has one).
  """
  if model not in MODELS:
    raise ValueError(f"model={model!r}; expected one of {MODELS}.")
  table = {}

  def add(ours, hf, kind="copy"):
    table[ours] = (hf, kind)

  def dense(ours, hf, kind="dense", bias_kind="copy"):
    add(f"{ours}/kernel", f"{hf}.weight", kind)
    add(f"{ours}/bias", f"{hf}.bias", bias_kind)

  def norm(ours, hf):
    add(f"{ours}/scale", f"{hf}.weight")
    add(f"{ours}/bias", f"{hf}.bias")

  e, he = "bert/embeddings", "bert.embeddings"
  add(f"{e}/token_embedder/embedding", f"{he}.word_embeddings.weight")
  add(f"{e}/position_embedder/embedding/embedding", f"{he}.position_embeddings.weight")
  add(f"{e}/segment_embedder/embedding", f"{he}.token_type_embeddings.weight")
  norm(f"{e}/layer_norm", f"{he}.LayerNorm")
  for i in range(config.num_layers):
    o, h = f"bert/encoder/layers_{i}", f"bert.encoder.layer.{i}"
    for name in ("query", "key", "value"):
      dense(f"{o}/attention/{name}", f"{h}.attention.self.{name}", "qkv", "qkv_bias")
    dense(f"{o}/attention/out", f"{h}.attention.output.dense", "out")
    norm(f"{o}/attention_norm", f"{h}.attention.output.LayerNorm")
    dense(f"{o}/mlp/wi", f"{h}.intermediate.dense")
    dense(f"{o}/mlp/wo", f"{h}.output.dense")
    norm(f"{o}/mlp_norm", f"{h}.output.LayerNorm")
  if model not in HEAD_MODELS or HEAD_MODELS[model][1]:
    dense("bert/pooler", "bert.pooler.dense")
  if model in HEAD_MODELS:
    head = HEAD_MODELS[model][2]
    dense(head, head)
    return table
  if model == "encoder":
    return {k[len("bert/"):]: v for k, v in table.items()}
  dense("mlm_head/transform", "cls.predictions.transform.dense")
  norm("mlm_head/layer_norm", "cls.predictions.transform.LayerNorm")
  add("mlm_head/bias", MLM_BIAS)
  dense("nsp_head", "cls.seq_relationship")
  return table


def hf_shape(kind: str, shape: tuple) -> tuple:
  """The HF tensor shape of one of our params of `shape`."""
  if kind == "dense":
    return tuple(shape[::-1])
  if kind == "qkv":      # [H, heads, d] <- [heads*d, H]
    return (shape[1] * shape[2], shape[0])
  if kind == "qkv_bias":
    return (shape[0] * shape[1],)
  if kind == "out":      # [heads, d, H] <- [H, heads*d]
    return (shape[2], shape[0] * shape[1])
  return tuple(shape)


def to_ours(kind: str, x: np.ndarray, shape: tuple) -> np.ndarray:
  if kind in ("dense", "qkv", "out"):
    x = x.T
  return np.ascontiguousarray(x.reshape(shape))


def to_hf(kind: str, x: np.ndarray) -> np.ndarray:
  if kind == "qkv":
    return x.reshape(x.shape[0], -1).T
  if kind == "out":
    return x.reshape(-1, x.shape[-1]).T
  if kind == "dense":
    return x.T
  return x.reshape(-1) if kind == "qkv_bias" else x


# Our flat paths whose leading dimension is the vocabulary, padded to
# TransformerConfig.padded_vocab rows; HF files hold vocab_size rows.
VOCAB_ROWS = ("embeddings/token_embedder/embedding", "mlm_head/bias")


def is_vocab_rows(path: str) -> bool:
  return path.endswith(VOCAB_ROWS)


def head_of(path: str) -> str:
  """Top-level module of a param path (pooler, mlm_head, embeddings, ...), `bert/` skipped."""
  return path[len("bert/"):].split("/")[0] if path.startswith("bert/") else path.split("/")[0]


def _module(config: TransformerConfig, model: str, num_labels: int):
  inputs = bert.dummy_inputs(1, 8, 2)
  if model == "pretraining":
    return bert.BertForPreTraining(config), inputs
  inputs.pop("masked_lm_positions")
  if model == "encoder":
    return bert.BertModel(config), inputs
  if model == "question_answering":
    return heads.BertForQuestionAnswering(config), inputs
  if model == "token_classification":
    return heads.BertForTokenClassification(config, num_labels), inputs
  return heads.BertForSequenceClassification(config, num_labels, "cls"), inputs


def expected_shapes(config: TransformerConfig, model: str,
                    num_labels: int = 2) -> dict[str, tuple]:
  """Flat path -> shape of the unrolled model, traced (no allocation).

  Traced scanned (one layer to trace, so bert/large takes no longer than bert/tiny),
  then spelled out per layer. num_labels: the classifier's outputs (classification heads).
  """
  module, inputs = _module(config.replace(scan_layers=True), model, num_labels)
  tree = jax.eval_shape(lambda: module.init(jax.random.key(0), **inputs))["params"]
  shapes = {}
  for path, v in _flatten(_unbox(tree)).items():
    if _SCANNED.search(path):
      for i in range(config.num_layers):
        shapes[_SCANNED.sub(rf"\1encoder/layers_{i}/", path, count=1)] = tuple(v.shape[1:])
    else:
      shapes[path] = tuple(v.shape)
  table = hf_name_table(config, model)
  if set(shapes) != set(table):  # the model changed under the name table
    raise RuntimeError(f"HF name table out of date: {sorted(set(shapes) ^ set(table))}")
  return shapes


def fresh_params(shapes: dict[str, tuple], init_std: float, seed: int = 0
                 ) -> dict[str, np.ndarray]:
  """BERT's init for the given params, in numpy (no compile): kernels ~ N(0, init_std)
  truncated at 2 std (as `TransformerConfig.kernel_init`), biases 0, LayerNorm scales 1."""
  rng = np.random.default_rng(seed)
  out = {}
  for path, shape in sorted(shapes.items()):
    leaf = path.rsplit("/", 1)[-1]
    if leaf in ("kernel", "embedding"):
      x = rng.standard_normal(shape)
      while (bad := np.abs(x) > 2).any():          # resample the tails
        x[bad] = rng.standard_normal(int(bad.sum()))
      out[path] = (x * init_std).astype(np.float32)
    else:
      out[path] = (np.ones if leaf == "scale" else np.zeros)(shape, np.float32)
  return out


# ---------------------------------------------------------------------------- trees
_SCANNED = re.compile(r"(^|/)encoder/layers/")


def _unbox(tree):
  return nn.meta.unbox(tree)


def _flatten(tree, prefix: str = "") -> dict[str, Any]:
  out = {}
  for k, v in tree.items():
    path = f"{prefix}/{k}" if prefix else str(k)
    out.update(_flatten(v, path) if isinstance(v, Mapping) else {path: v})
  return out


def unflatten(flat: dict[str, Any]) -> dict:
  tree: dict = {}
  for path, v in flat.items():
    *parents, leaf = path.split("/")
    node = tree
    for p in parents:
      node = node.setdefault(p, {})
    node[leaf] = v
  return tree


def stack_layers(flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """`.../encoder/layers_i/x` -> `.../encoder/layers/x` stacked on axis 0 (scanned layout)."""
  groups: dict[str, dict[int, np.ndarray]] = {}
  out = {}
  for path, v in flat.items():
    m = re.match(r"^(.*encoder)/layers_(\d+)/(.*)$", path)
    if m:
      groups.setdefault(f"{m[1]}/layers/{m[3]}", {})[int(m[2])] = v
    else:
      out[path] = v
  for path, layers in groups.items():
    out[path] = np.stack([layers[i] for i in range(len(layers))])
  return out


def plain_flat(params: Any) -> dict[str, np.ndarray]:
  """Any of our param trees -> flat unrolled numpy: unboxed, {'params': ...} stripped."""
  tree = _unbox(params)
  if set(tree) == {"params"}:
    tree = tree["params"]
  out = {}
  for path, v in _flatten(tree).items():
    v = np.asarray(v)
    if _SCANNED.search(path):
      for i in range(v.shape[0]):
        out[_SCANNED.sub(rf"\1encoder/layers_{i}/", path, count=1)] = v[i]
    else:
      out[path] = v
  return out
