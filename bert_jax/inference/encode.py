"""Texts -> vectors with a BERT encoder: one vector a text, or one a token.

  mean  the average of the real tokens, [CLS] and [SEP] included, exactly as
        sentence-transformers' mean pooling
  cls   the [CLS] vector as is (no pooler dense/tanh)
  none  every token's vector, [CLS] and [SEP] included

`layers` indexes the hidden states as python does (-1 the last layer, 0 the embedding
output); several are concatenated in the given order (as bert-as-service's pooling_layer
and BERT's feature-based NER) or averaged. The texts run packed several to a row
(passes.py): each text's vectors are those of a forward pass of it alone, to float
rounding. The embed command (bert_jax/apps/embed.py) and `Model.encode` (api.py) call
this.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.inference import passes
from bert_jax.inference.loader import InputError
from bert_jax.layers.config import TransformerConfig
from bert_jax.models.bert import BertModel
from bert_jax.models.modernbert import ModernBertModel

POOLINGS = ("mean", "cls", "none")


@dataclasses.dataclass
class Encoded:
  ids: list[np.ndarray]       # per line: [CLS] tokens [SEP], int32
  tokens: list[list[str]]
  num_truncated: int
  num_empty: int


def tokenize(tokenizer, texts: Sequence[str], max_length: int) -> Encoded:
  """[CLS] text [SEP] per line, truncated to max_length tokens (the [SEP] is kept)."""
  cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
  if cls_id is None or sep_id is None:
    raise InputError("the checkpoint's vocabulary has no [CLS] / [SEP] token")
  ids, tokens, truncated, empty = [], [], 0, 0
  for enc in tokenizer.encode_batch(list(texts), add_special_tokens=False):
    body_ids, body_tokens = enc.ids, enc.tokens
    empty += not body_ids
    if len(body_ids) > max_length - 2:
      truncated += 1
      body_ids, body_tokens = body_ids[:max_length - 2], body_tokens[:max_length - 2]
    ids.append(np.array([cls_id, *body_ids, sep_id], np.int32))
    tokens.append(["[CLS]", *body_tokens, "[SEP]"])
  return Encoded(ids, tokens, truncated, empty)


@functools.partial(jax.jit, static_argnames=("config", "layers", "combine"))
def _forward(params, ids, positions, segments, *, config: TransformerConfig,
             layers: tuple[int, ...], combine: str):
  """Packed rows -> token vectors. ids, positions, segments [rows, len]: several texts
  per row, each with positions from 0 and its own segment id (1, 2, ...; 0 = padding),
  attending only within itself. Returns [rows, len, dim] float32."""
  want_hidden = layers != (-1,)
  # ModernBERT's hidden_states are transformers': each layer's output before final_norm.
  module = (ModernBertModel(config) if config.family == "modernbert"
            else BertModel(config, add_pooler=False))
  out = module.apply(
      {"params": params}, ids, (segments > 0).astype(jnp.int32), positions=positions,
      packed_segment_ids=segments, output_hidden_states=want_hidden)
  if want_hidden:
    # The last layer is always the model's output: ModernBERT's after its final norm
    # (transformers' last_hidden_state), whichever other layers are picked with it.
    last = config.num_layers if config.family == "modernbert" else None
    picked = [out["sequence_output"] if i % (config.num_layers + 1) == last
              else out["hidden_states"][i] for i in layers]    # each [rows, len, hidden]
    x = (jnp.concatenate(picked, axis=-1) if combine == "concat"
         else jnp.mean(jnp.stack(picked), axis=0))
  else:
    x = out["sequence_output"]
  return x.astype(jnp.float32)                             # [rows, len, dim]


def run_model(config: TransformerConfig, params, ids: Sequence[np.ndarray], *,
              pooling: str = "mean", layers: tuple[int, ...] = (-1,), combine: str = "concat",
              batch_size: int = 32, max_length: int = 512,
              progress_bar: bool = False) -> list[np.ndarray]:
  """Per line, in input order: [dim] (mean / cls) or [len_i, dim] (none), float32.

  Texts are packed into rows (passes.plan_passes): every text keeps its own positions
  and attends only to itself, so its vectors are those of a forward pass of it alone (to
  float rounding), while padding is a few percent of the tokens instead of up to half of
  them with one text a row padded to a bucketed length (bench/RESULTS.md counts them). An
  input runs as passes of at most two shapes.
  progress_bar: a tqdm bar of passes on stderr (bert_jax/runtime/progress.py).
  """
  from bert_jax.runtime import progress  # pylint: disable=g-import-not-at-top
  del max_length  # the caller truncated the texts; a row may hold more tokens than that
  if pooling not in POOLINGS:
    raise ValueError(f"pooling={pooling!r}; expected one of {POOLINGS}")
  if not ids:
    return []
  # Once on the device, not with every batch; the pooler is not used.
  params = jax.device_put({k: v for k, v in params.items() if k != "pooler"})
  config = config.replace(deterministic=True)
  lengths = np.array([len(x) for x in ids], np.int64)
  plans = passes.plan_passes(lengths, batch_size)
  results: list[Optional[np.ndarray]] = [None] * len(ids)
  bar = progress.bar(total=sum(p.passes for p in plans), desc="embed", unit="pass",
                     show=progress_bar)
  for plan in plans:
    members = [[] for _ in range(plan.passes * plan.rows)]   # text indices of each row
    for i, r in zip(plan.texts, plan.row_of):
      members[r].append(i)
    for p in range(plan.passes):
      rows = members[p * plan.rows:(p + 1) * plan.rows]
      tokens = np.zeros((plan.rows, plan.row_length), np.int32)
      positions = np.zeros_like(tokens)
      segments = np.zeros_like(tokens)
      spans = []                                     # (text, row, first token)
      for r, row in enumerate(rows):
        at = 0
        for seg, i in enumerate(row, start=1):
          n = lengths[i]
          tokens[r, at:at + n], positions[r, at:at + n], segments[r, at:at + n] = (
              ids[i], np.arange(n), seg)
          spans.append((i, r, at))
          at += n
      # Full float32 matmuls even where the platform default is TF32 / bf16 passes.
      with jax.default_matmul_precision("float32"):
        out = np.asarray(_forward(params, tokens, positions, segments, config=config,
                                  layers=layers, combine=combine))   # [rows, len, dim]
      for i, r, at in spans:
        x = out[r, at:at + lengths[i]]                                # [len_i, dim]
        # sentence-transformers' mean: sum(x * mask) / sum(mask) over the real tokens
        results[i] = (x.copy() if pooling == "none" else x[0].copy() if pooling == "cls"
                      else x.mean(axis=0, dtype=np.float32))
      bar.update(1)
  bar.close()
  return results


def normalize(x: np.ndarray) -> np.ndarray:
  """Unit L2 norm along the last axis (torch.nn.functional.normalize, eps 1e-12)."""
  return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
