"""BERT (Devlin et al. 2019): BertModel and BertForPreTraining (MLM + NSP heads).

Param tree (unrolled; with scan_layers `encoder/layers` holds stacked layers):
  bert/embeddings/{token_embedder,position_embedder,segment_embedder}/embedding, layer_norm
  bert/encoder/layers_i/{attention/{query,key,value,out},attention_norm,mlp/{wi,wo},mlp_norm}
  bert/pooler
  mlm_head/{transform,layer_norm,bias}   (decoder tied to token_embedder)
  nsp_head
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.kernels import masks
from bert_jax.layers.blocks import ACTIVATIONS
from bert_jax.runtime import sharding
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.embedding import embedding, vocab_logits
from bert_jax.layers.norm import layer_norm
from bert_jax.layers import dense as dense_lib
from bert_jax.layers import embedding as embedding_lib
from bert_jax.layers.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from bert_jax.layers.stacks import Encoder

Array = jax.Array


class BertEmbeddings(nn.Module):
  """token + position + segment embeddings -> LayerNorm -> dropout."""
  config: TransformerConfig

  def setup(self):
    cfg = self.config
    self.token_embedder = embedding(cfg, cfg.padded_vocab, "vocab")
    if cfg.position == "learned":
      self.position_embedder = LearnedPositionalEmbedding(cfg)
    elif cfg.position == "sinusoidal":
      self.position_embedder = SinusoidalPositionalEncoding(cfg.max_len, cfg.hidden_size)
    if cfg.type_vocab_size:
      self.segment_embedder = embedding(cfg, cfg.type_vocab_size, "segment")
    self.layer_norm = layer_norm(cfg, "layer_norm")
    self.dropout = nn.Dropout(cfg.dropout_rate, deterministic=cfg.deterministic)

  def __call__(self, input_ids: Array, segment_ids: Array | None, positions: Array) -> Array:
    cfg = self.config
    x = self.token_embedder(input_ids)                        # [batch, len, hidden]
    if cfg.scale_embeddings:
      x = x * jnp.sqrt(cfg.hidden_size).astype(x.dtype)
    if cfg.position in ("learned", "sinusoidal"):
      x = x + self.position_embedder(positions).astype(x.dtype)
    if cfg.type_vocab_size:
      segment_ids = jnp.zeros_like(input_ids) if segment_ids is None else segment_ids
      x = x + self.segment_embedder(segment_ids)
    return self.dropout(self.layer_norm(x))

  def attend(self, x: Array) -> Array:
    """x [..., hidden] -> logits [..., padded_vocab] against the token table (attend)."""
    return embedding_lib.attend(self.config, self.token_embedder, x, logits_dtype=None)


class BertModel(nn.Module):
  """The BERT encoder: embeddings, Transformer encoder, tanh pooler on [CLS]."""
  config: TransformerConfig
  add_pooler: bool = True
  return_weights: bool = False

  def setup(self):
    cfg = self.config
    self.embeddings = BertEmbeddings(cfg)
    self.encoder = Encoder(cfg, return_weights=self.return_weights)
    if self.add_pooler:
      self.pooler = nn.Dense(cfg.hidden_size, dtype=cfg.compute_dtype,
                             param_dtype=cfg.params_dtype,
                             kernel_init=cfg.kernel_init("embed", "mlp"),
                             bias_init=cfg.zeros_init("mlp"))

  def __call__(self, input_ids: Array, input_mask: Array | None = None,
               segment_ids: Array | None = None, positions: Array | None = None,
               packed_segment_ids: Array | None = None, output_hidden_states: bool = False,
               pool_positions: Array | None = None):
    """Encodes token ids.

    Args:
      input_ids: [batch, len] int.
      input_mask: [batch, len], 1 for real tokens, 0 for padding (None: all real).
      segment_ids: [batch, len] token types (sentence A = 0, B = 1).
      positions: [batch, len] position ids (None: 0..len-1; packed rows restart per doc).
      packed_segment_ids: [batch, len] document ids of packed rows (1, 2, ...; 0 = pad):
        attention stays within a document (block-diagonal mask).
      output_hidden_states: also return the embeddings + every layer's output.
      pool_positions: [batch, K] the [CLS] position of each of a packed row's K examples:
        the pooler runs on those, `pooled_output` is then [batch, K, hidden].

    Returns:
      dict with `sequence_output` [batch, len, hidden], `pooled_output` [batch, hidden]
      (if add_pooler) and `hidden_states` [num_layers + 1, batch, len, hidden] (if asked).
    """
    if input_mask is None:
      input_mask = jnp.ones_like(input_ids)
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(input_ids.shape[1]), input_ids.shape)
    mask = masks.row_mask(input_mask, packed_segment_ids)  # ids, no [b, 1, len, len]
    x = self.embeddings(input_ids, segment_ids, positions)
    x, hidden = self.encoder(x, mask, positions, output_hidden_states=output_hidden_states)
    out = {"sequence_output": x}
    if self.add_pooler and pool_positions is not None:
      cls = gather_positions(x, pool_positions)               # [batch, K, hidden]
      out["pooled_output"] = jnp.tanh(self.pooler(cls))
    elif self.add_pooler:
      # [CLS] rows over the data axes, features whole, as MlmHead's: unpinned, the NSP head
      # and x[:, 0]'s backward moved them back by all-to-all (tests/test_aot.py).
      rows = ("batch", "embed")
      cls = sharding.constrain(x[:, 0], rows)                 # [batch, hidden]
      out["pooled_output"] = sharding.constrain(jnp.tanh(self.pooler(cls)), rows)
    if output_hidden_states:
      out["hidden_states"] = hidden
    return out

  def attend(self, x: Array) -> Array:
    return self.embeddings.attend(x)


def gather_positions(sequence: Array, positions: Array) -> Array:
  """[batch, len, d], [batch, P] -> [batch, P, d]: the vectors at the given positions, as
  a one-hot matmul (batch·P·len·d FLOPs, small next to the encoder) rather than a gather:
  it partitions cleanly whatever the sharding, and avoids an XLA SPMD miscompile of the
  gather's scatter-add gradient (rows over (data, fsdp), activations over tensor)."""
  onehot = jax.nn.one_hot(positions, sequence.shape[1], dtype=sequence.dtype)  # [b, P, len]
  # HIGHEST: a selection must not round the hidden states (TPU/GPU default is bf16 passes).
  return jnp.einsum("bpl,bld->bpd", onehot, sequence, precision=jax.lax.Precision.HIGHEST)


class MlmHead(nn.Module):
  """dense -> GELU -> LayerNorm -> tied decoder (token embeddings^T) + bias."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array, attend) -> Array:
    cfg = self.config
    # Rows over the data axes, features whole: unpinned, the partitioner may gather the
    # global batch of this head's logits gradient onto every tensor chip.
    rows = ("batch",) + (None,) * (x.ndim - 2) + ("embed",)
    x = sharding.constrain(x, rows)                           # [..., hidden]
    x = nn.Dense(cfg.hidden_size, dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                 kernel_init=cfg.kernel_init("embed", "mlp"), bias_init=cfg.zeros_init("mlp"),
                 dot_general=dense_lib.for_config(cfg), name="transform")(x)
    x = ACTIVATIONS[cfg.activation](x)
    x = sharding.constrain(layer_norm(cfg, "layer_norm")(x), rows)
    bias = self.param("bias", cfg.zeros_init("vocab"), (cfg.padded_vocab,), cfg.params_dtype)
    logits = attend(x)                                        # [..., padded_vocab]
    bias = bias.astype(logits.dtype)  # x's dtype; float32 with model.matmul_dtype
    logits = logits + bias
    # Vocabulary over tensor, as the table's rows: the matmul's natural output layout.
    logits = sharding.constrain(logits, ("batch",) + (None,) * (logits.ndim - 2) + ("vocab",))
    return vocab_logits(logits, cfg)                          # [..., vocab]


class BertForPreTraining(nn.Module):
  """BERT with the MLM head (at the masked positions only) and the NSP head."""
  config: TransformerConfig
  nsp: bool = True

  @nn.compact
  def __call__(self, input_ids: Array, input_mask: Array | None = None,
               segment_ids: Array | None = None, masked_lm_positions: Array | None = None,
               positions: Array | None = None, packed_segment_ids: Array | None = None):
    """Returns dict(mlm_logits [batch, P, vocab] float32, nsp_logits [batch, 2] float32).

    masked_lm_positions [batch, P]: only these P = max_predictions_per_seq positions go
    through the vocabulary projection, which is the largest matmul of the model; None
    computes logits for every position (for inspection, not training).
    """
    cfg = self.config
    bert = BertModel(cfg, add_pooler=self.nsp, name="bert")
    out = bert(input_ids, input_mask, segment_ids, positions, packed_segment_ids)
    seq = out["sequence_output"]
    if masked_lm_positions is not None:
      seq = gather_positions(seq, masked_lm_positions)        # [batch, P, hidden]
    mlm_logits = MlmHead(cfg, name="mlm_head")(seq, bert.attend)
    result = {"mlm_logits": mlm_logits.astype(jnp.float32)}
    if self.nsp:
      nsp = nn.Dense(2, dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                     kernel_init=cfg.kernel_init("embed", "classes"),
                     bias_init=cfg.zeros_init("classes"), name="nsp_head")
      result["nsp_logits"] = nsp(out["pooled_output"]).astype(jnp.float32)
    return result


def dummy_inputs(batch: int = 1, length: int = 8, num_predictions: int = 2):
  """Inputs of the right shapes and dtypes for `init` / `eval_shape`."""
  ids = jnp.zeros((batch, length), jnp.int32)
  return dict(input_ids=ids, input_mask=jnp.ones_like(ids), segment_ids=ids,
              masked_lm_positions=jnp.zeros((batch, num_predictions), jnp.int32))

