"""The encoder stack, and how any stack runs its N blocks: optionally scanned (one compiled
layer) and remat'd (layers/decoder.py's stack runs the same way).

With `scan_layers`, the block params are stacked along a leading `layers` axis
(`.../layers/attention/query/kernel: [num_layers, ...]`); without it they sit under
`layers_0 ... layers_{N-1}` (layers/scan_layout.py converts between the two).
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.layers.blocks import EncoderBlock
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.norm import layer_norm
from bert_jax.layers.positional import RelativePositionBias

Array = jax.Array

# What the backward pass may keep of each block's forward. The named ones save tensors the
# blocks tag with checkpoint_name (attention.py: query_proj, key_proj, value_proj, out_proj),
# as MaxText's save_qkv_proj / save_dot_except_mlp do, and recompute the rest; the
# *_offloaded ones move what they keep to host memory (pinned_host) and back for the
# backward. docs/performance-notes.md, "Remat policies and splash attention on TPU".
_QKV = ("query_proj", "key_proj", "value_proj")
_POLICIES = jax.checkpoint_policies
_REMAT_POLICIES = {
    "full": None,  # save nothing, recompute the whole block in the backward pass
    "dots": _POLICIES.checkpoint_dots,
    "dots_no_batch": _POLICIES.dots_with_no_batch_dims_saveable,
    "qkv_proj": _POLICIES.save_only_these_names(*_QKV),
    "kv_proj": _POLICIES.save_only_these_names("key_proj", "value_proj"),
    "dots_except_mlp": _POLICIES.save_only_these_names(*_QKV, "out_proj"),
    "qkv_proj_offloaded": _POLICIES.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=list(_QKV),
        offload_src="device", offload_dst="pinned_host"),
    "minimal_offloaded": _POLICIES.offload_dot_with_no_batch_dims("device", "pinned_host"),
}


def layer_class(block_cls, cfg: TransformerConfig):
  if cfg.remat_policy == "none":
    return block_cls
  # prevent_cse is only needed outside scan (scan already blocks CSE across iterations).
  return nn.remat(block_cls, policy=_REMAT_POLICIES[cfg.remat_policy],
                  prevent_cse=not cfg.scan_layers)


def run_layers(module: nn.Module, block_cls, num_layers: int, x: Array, args: tuple,
                block_kwargs: dict[str, Any], collect_hidden: bool):
  """Applies num_layers blocks; returns (x, hidden states [num_layers + 1, ...] or None)."""
  cfg = module.config
  layer_cls = layer_class(block_cls, cfg)
  if cfg.scan_layers:
    scanned = nn.scan(
        layer_cls,
        variable_axes={"params": 0, "intermediates": 0, "cache": 0},
        split_rngs={"params": True, "dropout": True},
        in_axes=(nn.broadcast,) * len(args),
        length=num_layers,
        metadata_params={nn.PARTITION_NAME: "layers"})
    y, per_layer = scanned(cfg, scanned=True, collect_hidden=collect_hidden, name="layers",
                           **block_kwargs)(x, *args)
    hidden = jnp.concatenate([x[None], per_layer], axis=0) if collect_hidden else None
    return y, hidden
  hidden = [x]
  for i in range(num_layers):
    x = layer_cls(cfg, name=f"layers_{i}", **block_kwargs)(x, *args)
    hidden.append(x)
  return x, (jnp.stack(hidden) if collect_hidden else None)


class Encoder(nn.Module):
  """A stack of bidirectional EncoderBlocks (+ final LayerNorm when pre-LN)."""
  config: TransformerConfig
  return_weights: bool = False

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, positions: Array | None = None,
               output_hidden_states: bool = False):
    """x [batch, len, d] (embedded inputs); mask an attention.SegmentMask (what models
    pass: splash attention needs ids) or bools broadcastable to [batch, 1, len, len].

    Returns (output [batch, len, d], hidden_states [num_layers+1, batch, len, d] or None).
    """
    cfg = self.config
    bias = None
    if cfg.position == "relative":  # one table shared by all layers, as in T5
      bias = RelativePositionBias(cfg, bidirectional=True, name="relative_bias")(
          x.shape[1], x.shape[1])
    x, hidden = run_layers(self, EncoderBlock, cfg.num_layers, x, (mask, bias, positions),
                            {"return_weights": self.return_weights}, output_hidden_states)
    if cfg.pre_ln:
      x = layer_norm(cfg, "final_norm")(x)
    return x, hidden
