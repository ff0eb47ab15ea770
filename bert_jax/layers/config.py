"""The frozen model config shared by every layer and model (flax wmt's TransformerConfig).

One hashable dataclass holds every architectural choice, so modules take a single
`config` attribute and eval/decode variants are `config.replace(deterministic=True)`.
Sizes for named models live in `bert_jax/models/variants.py`, not here.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import flax.linen as nn
import jax.numpy as jnp


POSITION_KINDS = ("learned", "sinusoidal", "rotary", "relative", "none")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu")
REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch", "qkv_proj", "kv_proj",
                  "dots_except_mlp", "qkv_proj_offloaded", "minimal_offloaded")  # stacks.py
ATTENTION_IMPLS = ("auto", "splash", "flash_dropout", "xla", "cudnn", "reference")  # kernels.IMPLEMENTATIONS
INITS = ("bert", "xavier")  # kernel_init / embed_init
FAMILIES, POOLINGS = ("bert", "modernbert"), ("cls", "mean")  # models/registry.py
# Fields older checkpoints' meta may hold that this code no longer has (XLA:CPU tuning:
# packed rows' block attention, the Dense layers' 2-D gradients): from_dict drops them.
RETIRED_FIELDS = ("attention_block", "dense_grad_2d")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Architecture + numerics of a Transformer-family model."""
  vocab_size: int = 30522           # the tokenizer's ids: what logits, import and export see
  # Token table rows: vocab_size rounded up to a multiple of this (padded_vocab), to split
  # over a tensor axis and fill the MXU's lanes (configs set MaxText's 128 x tensor). The
  # padding rows are never an input id; their logits are cut off (vocab_logits).
  vocab_multiple: int = 1
  hidden_size: int = 768            # d_model
  num_layers: int = 12              # encoder layers (decoder-only models: decoder layers)
  num_decoder_layers: int = 0       # encoder-decoder models only
  num_heads: int = 12
  head_dim: Optional[int] = None    # d_k = d_v; None -> hidden_size // num_heads
  mlp_dim: Optional[int] = None     # FFN inner size f; None -> 4 * hidden_size
  max_len: int = 512                # max positions (learned table / sinusoid length / cache)
  type_vocab_size: int = 2          # BERT segment (token type) vocabulary; 0 disables it
  activation: str = "gelu"          # "gelu" (exact erf, as BERT), "gelu_tanh", "relu" (Vaswani)
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  layer_norm_eps: float = 1e-12
  pre_ln: bool = False              # False: post-LN (both papers); True: pre-LN (+ final LN)
  position: str = "learned"         # one of POSITION_KINDS
  relative_num_buckets: int = 32
  relative_max_distance: int = 128
  rotary_base: float = 10000.0
  init: str = "bert"                # "bert": truncated normal(init_std); "xavier": Vaswani
  init_std: float = 0.02
  scale_embeddings: bool = False    # multiply token embeddings by sqrt(d) (Vaswani)
  use_bias: bool = True
  dtype: str = "float32"            # compute dtype ("bfloat16" on accelerators)
  param_dtype: str = "float32"
  # The operand dtype of the weight matmuls (Dense layers, attention projections, the tied
  # output layer) and of the attention's two batched matmuls and decode K/V caches
  # (attention_dtype), accumulated in float32; None = the compute dtype. "bfloat16" with
  # float32 compute is mixed precision (e.g. for decoding).
  matmul_dtype: Optional[str] = None
  # One of ATTENTION_IMPLS; "auto": splash on TPU (flash_dropout with attention dropout),
  # cuDNN on GPU, XLA on CPU (kernels/).
  attention_impl: str = "auto"
  # ModernBERT's (models/modernbert.py); local_window: HF's local_attention (0: global).
  family: str = "bert"              # one of FAMILIES
  local_window: int = 0
  global_every: int = 1
  local_rotary_base: float = 10000.0
  norm_bias: bool = True
  mlp_bias: Optional[bool] = None   # None: use_bias
  head_bias: bool = True
  decoder_bias: bool = True
  pooling: str = "cls"              # one of POOLINGS
  scan_layers: bool = False
  remat_policy: str = "none"        # one of REMAT_POLICIES
  deterministic: bool = False       # no dropout (eval / decode)
  decode: bool = False              # autoregressive decoding with a KV cache

  def __post_init__(self):
    for name, choices in (("position", POSITION_KINDS), ("activation", ACTIVATIONS),
                          ("remat_policy", REMAT_POLICIES), ("attention_impl", ATTENTION_IMPLS),
                          ("init", INITS), ("family", FAMILIES), ("pooling", POOLINGS)):
      _check_choice(name, getattr(self, name), choices)
    if self.vocab_multiple < 1:
      raise ValueError(f"TransformerConfig.vocab_multiple={self.vocab_multiple}; expected a "
                       "positive integer (1: no padding).")
    # A zero or negative size would build a model without those layers (num_layers=-1
    # trained an embedding-only BERT with a negative MFU) or divide by zero later.
    for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "max_len",
                 "global_every"):
      _check_at_least(name, getattr(self, name), 1)
    for name in ("num_decoder_layers", "type_vocab_size", "local_window"):
      _check_at_least(name, getattr(self, name), 0)
    for name in ("head_dim", "mlp_dim"):
      if getattr(self, name) is not None:
        _check_at_least(name, getattr(self, name), 1)
    for name in ("dtype", "param_dtype", "matmul_dtype"):
      value = getattr(self, name)
      if value is not None and not _is_float_dtype(value):
        raise ValueError(f"TransformerConfig.{name}={value!r}; expected a float dtype name: "
                         "float32, bfloat16 or float16.")
    if self.hidden_size % self.num_heads and self.head_dim is None:
      raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads "
                       f"{self.num_heads}; set head_dim explicitly.")

  @classmethod
  def from_dict(cls, fields: dict) -> "TransformerConfig":
    """The config a checkpoint's meta holds, written by this code or an older one."""
    return cls(**{k: v for k, v in fields.items() if k not in RETIRED_FIELDS})

  def replace(self, **kwargs) -> "TransformerConfig":
    return dataclasses.replace(self, **kwargs)

  @property
  def padded_vocab(self) -> int:
    """Rows of the token embedding / output tables: vocab_size up to a vocab_multiple."""
    return -(-self.vocab_size // self.vocab_multiple) * self.vocab_multiple

  @property
  def d_head(self) -> int:
    return self.head_dim or self.hidden_size // self.num_heads

  @property
  def d_mlp(self) -> int:
    return self.mlp_dim or 4 * self.hidden_size

  def flops_per_token(self, seq_len: int) -> float:
    """Forward matmul FLOPs per token of the `num_layers` self-attention blocks.

    nanoGPT's estimate_mfu (PaLM appendix B) with full, not causal, attention: per
    layer the QKV + output projections 2·4·d·(h·d_k), the FFN 2·2·d·f, and the scores
    plus the weighted sum 2·2·T·(h·d_k). A multiply-add is 2 FLOPs; embeddings,
    norms and heads are left out (a task adds its head's). Training is 3x this.
    ModernBERT: a gated FFN (2·3·d·f); local layers score local_window + 1 keys.
    """
    d, width = self.hidden_size, self.num_heads * self.d_head
    ffn = 2 * (3 if self.family == "modernbert" else 2) * d * self.d_mlp
    local = self.local_window and sum(i % self.global_every > 0 for i in range(self.num_layers))
    keys = (self.num_layers - local) * seq_len + local * min(seq_len, self.local_window + 1)
    return float(self.num_layers * (2 * 4 * d * width + ffn) + 2 * 2 * keys * width)


  @property
  def compute_dtype(self):
    return jnp.dtype(self.dtype)

  @property
  def attention_dtype(self):
    """The operand dtype of the attention's two batched matmuls and of the decode caches'
    keys/values: matmul_dtype if set (bf16 caches are half the bytes to write, re-gather
    for beams and read each step), else the compute dtype."""
    return jnp.dtype(self.matmul_dtype) if self.matmul_dtype else self.compute_dtype

  @property
  def params_dtype(self):
    return jnp.dtype(self.param_dtype)

  def kernel_init(self, *logical_axes: str):
    """Initializer for a weight, with its logical axis names attached."""
    if self.init == "xavier":
      base = nn.initializers.xavier_uniform()
    else:
      base = nn.initializers.truncated_normal(self.init_std)
    return nn.with_logical_partitioning(base, logical_axes)

  def embed_init(self, *logical_axes: str):
    if self.init == "xavier":
      # Vaswani et al. scale embeddings by sqrt(d) on the way in, so start them at 1/sqrt(d).
      base = nn.initializers.normal(self.hidden_size ** -0.5)
    else:
      base = nn.initializers.truncated_normal(self.init_std)
    return nn.with_logical_partitioning(base, logical_axes)

  @staticmethod
  def zeros_init(*logical_axes: str):
    return nn.with_logical_partitioning(nn.initializers.zeros_init(), logical_axes)

  @staticmethod
  def ones_init(*logical_axes: str):
    return nn.with_logical_partitioning(nn.initializers.ones_init(), logical_axes)


def _check_choice(name, value, choices):
  if value not in choices:
    raise ValueError(f"TransformerConfig.{name}={value!r}; expected one of {choices}.")


def _check_at_least(name, value, low):
  if value < low:
    raise ValueError(f"TransformerConfig.{name}={value!r}; expected an integer >= {low}.")


def _is_float_dtype(name) -> bool:
  try:
    return jnp.issubdtype(jnp.dtype(name), jnp.floating)
  except TypeError:  # numpy: "data type 'bf16' not understood"
    return False
