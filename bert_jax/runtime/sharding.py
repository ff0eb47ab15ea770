"""The sharding vocabulary the model code uses: mesh axis names, the one logical-axis-rules
table, and activation pins by logical name (`constrain`). Model code imports this file;
the mesh itself, state shardings and host batches are runtime/parallel.py's, the platform
a program is traced for runtime/tracing.py's.

Every parameter in bert_jax carries logical axis names (`nn.with_logical_partitioning`);
this file is the only place that says how those names map onto the physical mesh
axes (`data`, `fsdp`, `tensor`). Changing a parallelism strategy is a change of
this table or of the mesh shape in the config, never of model code.
"""
from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
from jax.sharding import PartitionSpec as P

MESH_AXES = ("data", "fsdp", "tensor")

# The batch is split over every data-parallel axis (plain DP and FSDP alike).
BATCH_AXES = ("data", "fsdp")

# Logical name -> mesh axis (or None: replicated). First match wins (flax semantics).
# Weight matrices are sharded along `embed` over fsdp (ZeRO-3 style) and along their
# "wide" dimension (heads / mlp / vocab) over tensor (Megatron style).
LOGICAL_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", BATCH_AXES),
    ("length", None),
    # The residual stream between blocks: its positions over `tensor` (Megatron's sequence
    # parallelism), so what a remat'd layer saves, and its LayerNorms and dropouts, split
    # over the tensor chips instead of repeating on each; the blocks' projections gather
    # them back (all-gather + reduce-scatter: the all-reduce of tensor parallelism, split).
    ("residual_length", "tensor"),
    ("kv_length", None),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
    ("position", None),
    ("segment", None),
    ("classes", None),
    ("layers", None),
    ("relpos_buckets", None),
    ("norm", None),
    ("fused", None),  # the q/k/v or input/gate split of ModernBERT's Wqkv / Wi
)


def constrain(x: jax.Array, logical_names: Sequence[str | None],
              rules=LOGICAL_RULES) -> jax.Array:
  """x pinned to the sharding its logical names map to, when traced on a mesh (`traced_on`:
  the loop's and aot's jitted steps); outside one (eager calls, stand-alone decoding and
  embedding) x itself.

  Why not `nn.with_logical_constraint`: it needs an `nn.logical_axis_rules` context,
  which would also constrain every boxed parameter as it is unboxed (flax's DenseGeneral
  unboxes a flattened 2-D kernel under 3 names and fails). Without such a pin the SPMD
  partitioner may keep activations on `data` alone under fsdp: BERT-large S128 at 2048
  rows on v5e:4x4 then needed 19.1 GiB per chip (transformers' model: 14.2).
  """
  if jax.sharding.get_abstract_mesh().empty:
    return x
  return jax.lax.with_sharding_constraint(x, nn.logical_to_mesh_axes(logical_names, rules))


def spread_over_all_devices(tree):
  """Constrains every array's leading (batch) dim over all mesh axes (inside jit + mesh).

  Applied to model outputs before the loss: the loss then runs fully data-parallel on
  small [batch, P, vocab] logits instead of vocab-sharded over `tensor`. Besides being
  cheap, it sidesteps an XLA SPMD miscompile we hit on a 3-D (2, 2, 2) mesh, where the
  backward pass of a cross-entropy over vocab-sharded logits with a (data, fsdp)-sharded
  batch gave wrong gradients (tests/train/test_sharded_steps.py guards it).
  """
  return jax.tree_util.tree_map(spread_rows, tree)


def spread_rows(x):
  """x (inside jit + mesh) with its leading (batch) dim over all mesh axes, the rest whole
  on each chip."""
  if getattr(x, "ndim", 0) == 0:
    return x
  return jax.lax.with_sharding_constraint(x, P(MESH_AXES, *([None] * (x.ndim - 1))))
