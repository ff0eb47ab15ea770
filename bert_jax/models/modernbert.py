"""ModernBERT (Warner et al. 2024): a pre-norm encoder with rotary positions, GeGLU and
alternating global / sliding-window attention; the MLM and fine-tuning heads.

Names mirror transformers' modeling_modernbert.py, so interop is a rename (interop/):
  model/embeddings/{tok_embeddings/embedding, norm}          (no position table)
  model/layers_i/{attn_norm, attn/{Wqkv, Wo}, mlp_norm, mlp/{Wi, Wo}}   (layer 0: no
      attn_norm, an identity as in transformers)
  model/final_norm
  head/{dense, norm}, decoder_bias       ForMaskedLM; the decoder is the token table, tied
  head/{dense, norm}, classifier         For{Sequence,Token}Classification

Every `config.global_every`-th layer (0, n, 2n, ...) attends globally with rotary theta
`rotary_base`; the others within `local_window // 2` positions each side
(kernels.window_lib.with_window) with `local_rotary_base`. Attention is kernels.attention, so
the fused kernel of the platform runs both kinds (splash's local mask on TPU). The layers
differ (kind, layer 0's norm), so the stack is unrolled: scan_layers is refused.
"""
from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from bert_jax import kernels
from bert_jax.kernels import masks
from bert_jax.kernels import window as window_lib
from bert_jax.layers import dense as dense_lib
from bert_jax.layers import embedding as embedding_lib
from bert_jax.layers import rotary
from bert_jax.layers.attention import KEY_VALUE, QUERY
from bert_jax.layers.blocks import ACTIVATIONS, RESIDUAL
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.norm import layer_norm
from bert_jax.layers.stacks import layer_class
from bert_jax.models.bert import gather_positions
from bert_jax.runtime import sharding

Array = jax.Array


def _init(cfg: TransformerConfig, std: float, *logical_axes: str):
  """transformers' ModernBERT init: a normal cut at 2 std (initializer_cutoff_factor)."""
  del cfg
  return nn.with_logical_partitioning(
      nn.initializers.truncated_normal(std, lower=-2.0, upper=2.0), logical_axes)


def _std_out(cfg: TransformerConfig) -> float:
  """Output projections start smaller with depth: init_std / sqrt(2 L) (transformers)."""
  return cfg.init_std / math.sqrt(2.0 * cfg.num_layers)


def mlp_bias(cfg: TransformerConfig) -> bool:
  """Whether the MLP has biases: cfg.mlp_bias, or the attention's (use_bias) when None."""
  return cfg.use_bias if cfg.mlp_bias is None else cfg.mlp_bias


class ModernBertEmbeddings(nn.Module):
  """token embeddings -> LayerNorm -> dropout (positions are rotary, in attention)."""
  config: TransformerConfig

  def setup(self):
    cfg = self.config
    self.tok_embeddings = nn.Embed(
        cfg.padded_vocab, cfg.hidden_size, dtype=cfg.compute_dtype,
        param_dtype=cfg.params_dtype, embedding_init=_init(cfg, cfg.init_std, "vocab", "embed"))
    self.norm = layer_norm(cfg, "norm")
    self.drop = nn.Dropout(cfg.dropout_rate, deterministic=cfg.deterministic)

  def __call__(self, input_ids: Array) -> Array:
    return self.drop(self.norm(self.tok_embeddings(input_ids)))

  def attend(self, x: Array) -> Array:
    return embedding_lib.attend(self.config, self.tok_embeddings, x, logits_dtype=None)


class ModernBertAttention(nn.Module):
  """Fused Wqkv -> rotary (the layer kind's theta) -> kernels.attention -> Wo -> dropout."""
  config: TransformerConfig
  local: bool = False

  @nn.compact
  def __call__(self, x: Array, mask, positions: Array, return_weights: bool = False):
    cfg = self.config
    dense = functools.partial(nn.DenseGeneral, use_bias=cfg.use_bias, dtype=cfg.compute_dtype,
                              param_dtype=cfg.params_dtype,
                              dot_general=dense_lib.for_config(cfg))
    # [batch, len, 3, heads, d]: transformers' Wqkv rows are q, then k, then v.
    qkv = dense(features=(3, cfg.num_heads, cfg.d_head), axis=-1,
                kernel_init=_init(cfg, cfg.init_std, "embed", "fused", "heads", "kv"),
                bias_init=cfg.zeros_init("fused", "heads", "kv"), name="Wqkv")(x)
    query = checkpoint_name(sharding.constrain(qkv[:, :, 0], QUERY), "query_proj")
    key = checkpoint_name(sharding.constrain(qkv[:, :, 1], KEY_VALUE), "key_proj")
    value = checkpoint_name(sharding.constrain(qkv[:, :, 2], KEY_VALUE), "value_proj")
    theta = cfg.local_rotary_base if self.local else cfg.rotary_base
    query = rotary.apply_rotary(query, positions, theta)
    key = rotary.apply_rotary(key, positions, theta)
    if self.local:
      mask = window_lib.with_window(mask, cfg.local_window // 2)
    dropout_rng = None
    if not cfg.deterministic and cfg.attention_dropout_rate > 0.0:
      dropout_rng = self.make_rng("dropout")
    out = kernels.attention(query, key, value, None, mask, dropout_rng,
                            cfg.attention_dropout_rate, cfg.deterministic,
                            cfg.attention_dtype, cfg.attention_impl, return_weights)
    if return_weights:
      out, weights = out
      self.sow("intermediates", "attention_weights", weights)
    out = sharding.constrain(out, QUERY)                      # [batch, len, heads, d]
    out = dense(features=x.shape[-1], axis=(-2, -1),
                kernel_init=_init(cfg, _std_out(cfg), "heads", "kv", "embed"),
                bias_init=cfg.zeros_init("embed"), name="Wo")(out)
    out = nn.Dropout(cfg.attention_dropout_rate, deterministic=cfg.deterministic)(out)
    return checkpoint_name(out, "out_proj")


class ModernBertMLP(nn.Module):
  """GeGLU (Shazeer 2020): Wi gives input and gate, Wo(dropout(act(input) * gate))."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array) -> Array:
    cfg = self.config
    dense = functools.partial(nn.DenseGeneral, use_bias=mlp_bias(cfg),
                              dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                              dot_general=dense_lib.for_config(cfg))
    # [batch, len, 2, mlp]: transformers' Wi rows are the input half, then the gate half.
    h = dense(features=(2, cfg.d_mlp), kernel_init=_init(cfg, cfg.init_std, "embed", "fused",
                                                           "mlp"),
              bias_init=cfg.zeros_init("fused", "mlp"), name="Wi")(x)
    h = sharding.constrain(h, ("batch", "length", None, "mlp"))
    h = ACTIVATIONS[cfg.activation](h[:, :, 0]) * h[:, :, 1]
    h = nn.Dropout(cfg.dropout_rate, deterministic=cfg.deterministic)(h)
    return dense(features=x.shape[-1], kernel_init=_init(cfg, _std_out(cfg), "mlp", "embed"),
                 bias_init=cfg.zeros_init("embed"), name="Wo")(h)


class ModernBertLayer(nn.Module):
  """Pre-norm: x + attn(norm(x)) (layer 0: no norm), then x + mlp(norm(x))."""
  config: TransformerConfig
  layer_id: int = 0
  return_weights: bool = False

  @nn.compact
  def __call__(self, x: Array, mask, positions: Array) -> Array:
    cfg = self.config
    x = sharding.constrain(x, RESIDUAL)
    h = x if self.layer_id == 0 else layer_norm(cfg, "attn_norm")(x)
    local = self.layer_id in window_lib.local_layers(cfg)
    x = x + ModernBertAttention(cfg, local=local, name="attn")(h, mask, positions,
                                                               self.return_weights)
    x = x + ModernBertMLP(cfg, name="mlp")(layer_norm(cfg, "mlp_norm")(x))
    return sharding.constrain(x, RESIDUAL)


class ModernBertModel(nn.Module):
  """Embeddings, the layers, a final norm."""
  config: TransformerConfig
  return_weights: bool = False

  def setup(self):
    cfg = self.config
    if cfg.scan_layers:
      raise ValueError("ModernBERT's layers alternate global and local attention and are "
                       "unrolled: set model.scan_layers=false.")
    self.embeddings = ModernBertEmbeddings(cfg)
    block = layer_class(ModernBertLayer, cfg)
    self.layers = [block(cfg, layer_id=i, return_weights=self.return_weights,
                         name=f"layers_{i}") for i in range(cfg.num_layers)]
    self.final_norm = layer_norm(cfg, "final_norm")

  def __call__(self, input_ids: Array, input_mask: Array | None = None,
               positions: Array | None = None, packed_segment_ids: Array | None = None,
               output_hidden_states: bool = False) -> dict:
    """input_ids [batch, len]; input_mask 1 real / 0 padding; positions (None: 0..len-1;
    packed rows restart them per document); packed_segment_ids (1, 2, ...; 0 pad): each
    document attends to itself only. Returns sequence_output [batch, len, hidden] (after
    the final norm) and, if asked, hidden_states [num_layers + 1, batch, len, hidden]:
    the embeddings and each layer's output before the final norm, as transformers'."""
    if input_mask is None:
      input_mask = jnp.ones_like(input_ids)
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(input_ids.shape[1]), input_ids.shape)
    mask = masks.row_mask(input_mask, packed_segment_ids)
    x = self.embeddings(input_ids)
    hidden = [x]
    for layer in self.layers:
      x = layer(x, mask, positions)
      hidden.append(x)
    out = {"sequence_output": self.final_norm(x)}
    if output_hidden_states:
      out["hidden_states"] = jnp.stack(hidden)
    return out

  def attend(self, x: Array) -> Array:
    return self.embeddings.attend(x)


class ModernBertPredictionHead(nn.Module):
  """dense -> activation -> norm, before the MLM decoder or a classifier."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array) -> Array:
    cfg = self.config
    rows = ("batch",) + (None,) * (x.ndim - 2) + ("embed",)
    x = sharding.constrain(x, rows)
    x = nn.Dense(cfg.hidden_size, use_bias=cfg.head_bias, dtype=cfg.compute_dtype,
                 param_dtype=cfg.params_dtype, dot_general=dense_lib.for_config(cfg),
                 kernel_init=_init(cfg, _std_out(cfg), "embed", "mlp"),
                 bias_init=cfg.zeros_init("mlp"), name="dense")(x)
    return sharding.constrain(layer_norm(cfg, "norm")(ACTIVATIONS[cfg.activation](x)), rows)


class ModernBertForMaskedLM(nn.Module):
  """The MLM model: logits at the masked positions only (transformers' sparse_prediction).

  The call is BertForPreTraining's (segment_ids taken and ignored: no token types), so
  the pretraining task runs either; `nsp` must be False: ModernBERT has no NSP head.
  """
  config: TransformerConfig
  nsp: bool = False

  @nn.compact
  def __call__(self, input_ids: Array, input_mask: Array | None = None,
               segment_ids: Array | None = None, masked_lm_positions: Array | None = None,
               positions: Array | None = None, packed_segment_ids: Array | None = None):
    """Returns dict(mlm_logits [batch, P, vocab] float32); all positions when
    masked_lm_positions is None."""
    del segment_ids
    cfg = self.config
    if self.nsp:
      raise ValueError("ModernBERT has no next-sentence head: set data.mode='mlm_packed'.")
    model = ModernBertModel(cfg, name="model")
    seq = model(input_ids, input_mask, positions, packed_segment_ids)["sequence_output"]
    if masked_lm_positions is not None:
      seq = gather_positions(seq, masked_lm_positions)        # [batch, P, hidden]
    x = ModernBertPredictionHead(cfg, name="head")(seq)
    logits = model.attend(x)                                  # [..., padded_vocab]
    if cfg.decoder_bias:
      bias = self.param("decoder_bias", cfg.zeros_init("vocab"), (cfg.padded_vocab,),
                        cfg.params_dtype)
      logits = logits + bias.astype(logits.dtype)
    logits = sharding.constrain(logits, ("batch",) + (None,) * (logits.ndim - 2) + ("vocab",))
    return {"mlm_logits": embedding_lib.vocab_logits(logits, cfg).astype(jnp.float32)}


def pool(cfg: TransformerConfig, sequence: Array, input_mask: Array | None) -> Array:
  """[batch, len, hidden] -> [batch, hidden]: the first token (cfg.pooling "cls") or the
  mean of the real tokens ("mean"), as transformers' classifier_pooling."""
  if cfg.pooling == "cls":
    return sequence[:, 0]
  if input_mask is None:
    return sequence.mean(axis=1)
  weights = input_mask.astype(sequence.dtype)[..., None]
  return (sequence * weights).sum(axis=1) / jnp.maximum(weights.sum(axis=1), 1)  # a pad row


def pool_slots(cfg: TransformerConfig, sequence: Array, starts: Array,
               packed_segment_ids: Array) -> Array:
  """Packed rows [batch, len, hidden] -> [batch * K, hidden], a vector per example slot
  (tasks/finetune/packing.py; starts [batch, K] its first token, its tokens those of
  segment k + 1): `pool` of each example alone, its first token or its tokens' mean."""
  if cfg.pooling == "cls":
    pooled = gather_positions(sequence, starts)                # [batch, K, hidden]
  else:  # a one-hot matmul, HIGHEST: a selection must not round the states (TPU/GPU)
    slots = jnp.arange(1, starts.shape[1] + 1)
    member = (packed_segment_ids[:, None, :] == slots[None, :, None]).astype(sequence.dtype)
    total = jnp.einsum("bkl,bld->bkd", member, sequence, precision=jax.lax.Precision.HIGHEST)
    pooled = total / jnp.maximum(member.sum(-1), 1)[..., None]  # [batch, K, hidden]
  return pooled.reshape(-1, sequence.shape[-1])


def _classify(cfg: TransformerConfig, x: Array, num_labels: int) -> Array:
  """head -> dropout -> classifier, float32 logits; called inside a classifier's compact
  __call__, so `head` and `classifier` are that model's own params (transformers' names).
  transformers' classifier always has a bias, and starts at std hidden^-0.5."""
  x = ModernBertPredictionHead(cfg, name="head")(x)
  x = nn.Dropout(cfg.dropout_rate, deterministic=cfg.deterministic)(x)
  return nn.Dense(num_labels, dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                  kernel_init=_init(cfg, cfg.hidden_size ** -0.5, "embed", "classes"),
                  bias_init=cfg.zeros_init("classes"), name="classifier")(x).astype(
                      jnp.float32)


class ModernBertForSequenceClassification(nn.Module):
  """pool (cls or mean) -> head -> dropout -> classifier: logits [batch, num_labels]."""
  config: TransformerConfig
  num_labels: int

  @nn.compact
  def __call__(self, input_ids: Array, input_mask: Array | None = None,
               positions: Array | None = None, packed_segment_ids: Array | None = None,
               example_starts: Array | None = None, segment_ids: Array | None = None) -> dict:
    """Packed rows (positions, packed_segment_ids, example_starts [batch * K]): logits
    [batch * K, num_labels], a row per slot (empty ones: any values, weight 0 in the
    loss). segment_ids: the fine-tuning tasks' call, ignored (no token types)."""
    del segment_ids
    cfg = self.config
    seq = ModernBertModel(cfg, name="model")(input_ids, input_mask, positions,
                                             packed_segment_ids)["sequence_output"]
    if example_starts is None:
      pooled = pool(cfg, seq, input_mask)                     # [batch, hidden]
    else:
      starts = example_starts.reshape(input_ids.shape[0], -1)  # [batch, K]
      pooled = pool_slots(cfg, seq, starts, packed_segment_ids)
    return {"logits": _classify(cfg, pooled, self.num_labels)}


class ModernBertForTokenClassification(nn.Module):
  """head -> dropout -> classifier on every token: logits [batch, len, num_labels]."""
  config: TransformerConfig
  num_labels: int

  @nn.compact
  def __call__(self, input_ids: Array, input_mask: Array | None = None,
               positions: Array | None = None, packed_segment_ids: Array | None = None,
               segment_ids: Array | None = None) -> dict:
    """packed_segment_ids: packed rows; segment_ids: ignored (no token types)."""
    del segment_ids
    cfg = self.config
    seq = ModernBertModel(cfg, name="model")(input_ids, input_mask, positions,
                                             packed_segment_ids)
    return {"logits": _classify(cfg, seq["sequence_output"], self.num_labels)}
