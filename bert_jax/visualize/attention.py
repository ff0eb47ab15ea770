"""Attention matrices of BERT (self), the encoder-decoder (encoder self, decoder self and
cross = the alignment of a translated sentence) and GPT (causal), as arrays and tables.

The models sow every layer's softmax weights (the reference attention path, float32) into
"intermediates"; `collect` stacks them to [layers, batch, heads, q_len, kv_len].
"""
from __future__ import annotations

import functools
import re
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from bert_jax.inference.inputs import plain_tokens
from bert_jax.layers.config import TransformerConfig
from bert_jax.models.bert import BertModel
from bert_jax.models.gpt import GPT
from bert_jax.models.seq2seq import Transformer, shift_right

# Which sown matrices each model family offers (CLI --attention), the first is the default.
KINDS = {"bert": ("self",), "gpt": ("self",), "seq2seq": ("cross", "self", "encoder")}
_MODULES = {"bert": {"self": ("encoder", "attention")},
            "gpt": {"self": ("decoder", "self_attention")},
            "seq2seq": {"encoder": ("encoder", "attention"),
                        "self": ("decoder", "self_attention"),
                        "cross": ("decoder", "cross_attention")}}


def collect(intermediates: dict, stack: str, module: str) -> np.ndarray:
  """The `attention_weights` sown by `stack/.../module` -> [layers, batch, heads, q, kv].

  Reads both layouts: unrolled (`layers_i/module`, one matrix each) and scanned
  (`layers/module`, stacked along a leading layer axis).
  """
  found = {}
  for path, value in traverse_util.flatten_dict(intermediates).items():
    if path[-1] != "attention_weights" or path[-2] != module or stack not in path:
      continue
    value = value[0] if isinstance(value, tuple) else value   # sow appends to a tuple
    layer = next((p for p in path if re.fullmatch(r"layers(_\d+)?", str(p))), None)
    if layer == "layers":                                     # scanned: [layers, ...]
      for i, w in enumerate(np.asarray(value)):
        found[i] = w
    else:
      found[int(layer.split("_")[1])] = np.asarray(value)
  if not found:
    raise ValueError(f"no {stack}/{module} attention weights were sown")
  return np.stack([found[i] for i in sorted(found)])


@functools.partial(jax.jit, static_argnames=("config",))
def _bert(params, ids, mask, segments, *, config):
  _, state = BertModel(config, add_pooler=False, return_weights=True).apply(
      {"params": params}, ids, mask, segments, mutable=["intermediates"])
  return state["intermediates"]


@functools.partial(jax.jit, static_argnames=("config",))
def _gpt(params, ids, mask, *, config):
  _, state = GPT(config, return_weights=True).apply(
      {"params": params}, ids, mask, mutable=["intermediates"])
  return state["intermediates"]


@functools.partial(jax.jit, static_argnames=("config",))
def _seq2seq(params, src, src_mask, tgt_in, tgt_mask, *, config):
  _, state = Transformer(config, return_weights=True).apply(
      {"params": params}, src, tgt_in, src_mask, tgt_mask, mutable=["intermediates"])
  return state["intermediates"]


def _params_of(params: dict) -> dict:
  return {k: params[k] for k in ("embeddings", "encoder")}


def bert_weights(config: TransformerConfig, bert_params: dict, ids, mask=None,
                 segment_ids=None) -> np.ndarray:
  """ids [batch, len] -> [layers, batch, heads, len, len] float32 (rows sum to 1; keys
  that are padding get exactly 0)."""
  ids = np.asarray(ids, np.int32)
  mask = np.ones_like(ids) if mask is None else np.asarray(mask, np.int32)
  segment_ids = np.zeros_like(ids) if segment_ids is None else np.asarray(segment_ids, np.int32)
  with jax.default_matmul_precision("float32"):
    inter = _bert(_params_of(bert_params), ids, mask, segment_ids,
                  config=config.replace(deterministic=True))
  return collect(inter, "encoder", "attention")


def gpt_weights(config: TransformerConfig, params: dict, ids, mask=None) -> np.ndarray:
  """Causal self-attention [layers, batch, heads, len, len] (upper triangle exactly 0)."""
  ids = np.asarray(ids, np.int32)
  mask = np.ones_like(ids) if mask is None else np.asarray(mask, np.int32)
  with jax.default_matmul_precision("float32"):
    inter = _gpt(params, ids, mask, config=config.replace(deterministic=True, decode=False))
  return collect(inter, "decoder", "self_attention")


def seq2seq_weights(config: TransformerConfig, params: dict, src, tgt_inputs, src_mask=None,
                    tgt_mask=None) -> dict[str, np.ndarray]:
  """{"encoder", "self", "cross"} -> [layers, batch, heads, q, kv]. `cross` rows are target
  positions (decoder inputs), columns source tokens: the alignment matrix."""
  src, tgt_inputs = np.asarray(src, np.int32), np.asarray(tgt_inputs, np.int32)
  src_mask = (src > 0).astype(np.int32) if src_mask is None else np.asarray(src_mask, np.int32)
  tgt_mask = np.ones_like(tgt_inputs) if tgt_mask is None else np.asarray(tgt_mask, np.int32)
  with jax.default_matmul_precision("float32"):
    inter = _seq2seq(params, src, src_mask, tgt_inputs, tgt_mask,
                     config=config.replace(deterministic=True, decode=False))
  return {name: collect(inter, *_MODULES["seq2seq"][name]) for name in KINDS["seq2seq"]}


# ------------------------------------------------------------------ text -> tokens
def bos_id(tokenizer) -> int:
  """The decoder's start token: the first of [BOS] / <s> / [CLS] in the vocabulary, else 0
  (shift_right's default)."""
  for token in ("[BOS]", "<s>", "[CLS]"):
    if tokenizer.token_to_id(token) is not None:
      return tokenizer.token_to_id(token)
  return 0


# ---------------------------------------------------------------------- the table
def format_table(matrix: np.ndarray, rows: Sequence[str], cols: Sequence[str]) -> str:
  """Tokens as row and column labels, weights with two decimals."""
  width = max(4, *(len(c) for c in cols))
  label = max(len(r) for r in rows)
  lines = [" " * label + "".join(f" {c:>{width}}" for c in cols)]
  for r, row in zip(rows, matrix):
    lines.append(f"{r:<{label}}" + "".join(f" {v:>{width}.2f}" for v in row))
  return "\n".join(lines)


def parse_table(text: str) -> tuple[list[str], list[str], np.ndarray]:
  """The inverse of format_table (for tests and scripts): (rows, cols, matrix)."""
  lines = [l for l in text.strip("\n").split("\n") if l.strip()]
  cols = lines[0].split()
  rows, values = [], []
  for line in lines[1:]:
    label, *nums = line.split()
    rows.append(label)
    values.append([float(x) for x in nums])
  return rows, cols, np.array(values)


def shifted_targets(tokenizer, text_b: str) -> tuple[np.ndarray, list[str]]:
  """Decoder inputs [1, len] (BOS + target shifted right) and the target tokens, which
  label the rows: row i is the decoder predicting target token i."""
  ids, tokens = plain_tokens(tokenizer, text_b)
  return np.asarray(shift_right(jnp.asarray([ids], jnp.int32), bos_id(tokenizer))), tokens
