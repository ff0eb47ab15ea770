"""Device mesh, state shardings, and host batches placed on the mesh.

The logical-axis-rules table and the activation pins live in runtime/sharding.py (what
model code imports); they are re-exported here for the runtime's callers.
"""
from __future__ import annotations

import collections
import dataclasses
import math
from typing import Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from bert_jax.runtime.sharding import (  # noqa: F401  (re-exported)
    BATCH_AXES, LOGICAL_RULES, MESH_AXES, constrain, spread_over_all_devices, spread_rows)
from bert_jax.runtime.tracing import (  # noqa: F401  (re-exported)
    trace_platform, traced_on, with_trace_platform)




def mesh_shape(requested: Sequence[int], num_devices: int) -> tuple[int, ...]:
  """Resolves one -1 entry of a (data, fsdp, tensor) shape so the product is num_devices.

  Every error names config.mesh_shape and what it may hold.
  """
  shape = list(requested)
  allowed = (f"{len(MESH_AXES)} positive integers {MESH_AXES} whose product is the "
             f"{num_devices} devices, at most one of them -1 (the rest of the devices)")
  if (len(shape) != len(MESH_AXES) or shape.count(-1) > 1
      or not all(isinstance(s, int) and (s > 0 or s == -1) for s in shape)):
    raise ValueError(f"config.mesh_shape={tuple(requested)}: expected {allowed}.")
  known = math.prod(s for s in shape if s != -1)
  if -1 in shape:
    if num_devices % known:
      raise ValueError(f"config.mesh_shape={tuple(requested)} does not divide the "
                       f"{num_devices} devices: expected {allowed}.")
    shape[shape.index(-1)] = num_devices // known
  if math.prod(shape) != num_devices:
    raise ValueError(f"config.mesh_shape={tuple(requested)} uses {math.prod(shape)} "
                     f"devices, but {num_devices} are present: expected {allowed}.")
  return tuple(shape)


def fit_mesh_shape(requested: Sequence[int], num_devices: int, log=print) -> tuple[int, ...]:
  """`requested` resolved (mesh_shape) when it fits num_devices; else, for a shape with a
  -1 (the rest of the devices), the nearest one that does, with a printed line: each
  fixed axis shrinks to its largest divisor that the devices left still divide
  (bert_large's (-1, 4, 1) on one GPU -> (1, 1, 1); on 2 -> (1, 2, 1)). A shape without a
  -1 was meant exactly: the error then names the shape to pass."""
  try:
    return mesh_shape(requested, num_devices)
  except ValueError as e:
    if len(requested) != len(MESH_AXES) or not all(
        isinstance(s, int) and (s > 0 or s == -1) for s in requested):
      raise  # not a shape at all (a 0, a -2, two few axes): nothing to fit
    fitted, rest = [], num_devices
    for s in requested:
      fitted.append(-1 if s == -1 else math.gcd(max(s, 1), rest))
      rest //= fitted[-1] if s != -1 else 1
    fitted = [rest if s == -1 else s for s in fitted]
    if -1 not in requested or requested.count(-1) > 1:
      fitted = fitted if -1 in requested else [num_devices] + [1] * (len(MESH_AXES) - 1)
      raise ValueError(f"{e} E.g. --config.mesh_shape='{tuple(fitted)}'.") from None
    changed = ", ".join(f"{a} {r} -> {f}" for a, r, f in zip(MESH_AXES, requested, fitted)
                        if r not in (-1, f))
    log(f"config.mesh_shape={tuple(requested)} cannot exist on {num_devices} device(s): "
        f"using {tuple(fitted)} ({changed}); pass --config.mesh_shape to choose another.")
    return tuple(fitted)


def create_mesh(shape: Sequence[int] = (-1, 1, 1), devices=None) -> Mesh:
  """A (data, fsdp, tensor) mesh over all (or the given) devices."""
  devices = jax.devices() if devices is None else list(devices)
  resolved = mesh_shape(shape, len(devices))
  if devices[0].platform == "cpu":
    # CPU devices have no topology; keep their natural order.
    return Mesh(np.asarray(devices).reshape(resolved), MESH_AXES,
                axis_types=(AxisType.Auto,) * len(MESH_AXES))
  axis_types = (AxisType.Auto,) * len(MESH_AXES)
  try:
    # make_mesh orders devices along the physical topology (ICI rings on TPU).
    return jax.make_mesh(resolved, MESH_AXES, axis_types=axis_types, devices=devices)
  except NotImplementedError:
    # An axis that no product of whole physical axes matches (fsdp 8 on v5p-128's
    # 4x4x4 torus): split a physical axis between two mesh axes, as MaxText allows.
    from jax.experimental import mesh_utils  # pylint: disable=g-import-not-at-top
    grid = mesh_utils.create_device_mesh(resolved, devices, allow_split_physical_axes=True)
    return Mesh(grid, MESH_AXES, axis_types=axis_types)


def logical_to_sharding(logical_tree, mesh: Mesh, rules=LOGICAL_RULES):
  """Pytree of logical PartitionSpecs -> pytree of NamedShardings on `mesh`."""
  return nn.logical_to_mesh_sharding(logical_tree, mesh, rules)


def abstract_state_shardings(abstract_state, mesh: Mesh, rules=LOGICAL_RULES):
  """Shardings for a state built under `jax.eval_shape` (with LogicallyPartitioned leaves).

  Leaves without logical metadata (step counters, rngs, optimizer scalars) are replicated.
  """
  logical_specs = nn.get_partition_spec(abstract_state)
  shardings = logical_to_sharding(logical_specs, mesh, rules)
  check_divisible(nn.unbox(abstract_state), logical_specs, shardings)
  return shardings


def sharded_abstract(boxed_abstract, mesh: Mesh, rules=LOGICAL_RULES):
  """(ShapeDtypeStructs carrying their shardings, shardings) of an `eval_shape`d state
  with LogicallyPartitioned leaves: what a step is lowered against before anything exists."""
  shardings = abstract_state_shardings(boxed_abstract, mesh, rules)
  abstract = jax.tree_util.tree_map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
      nn.unbox(boxed_abstract), shardings)
  return abstract, shardings


# The config field that sets a logical axis's size, for the message of check_divisible.
_SIZE_FIELDS = {"vocab": "config.model.vocab_size", "heads": "config.model.num_heads",
                "mlp": "config.model.mlp_dim", "embed": "config.model.hidden_size"}


def check_divisible(abstract, logical_specs, shardings) -> None:
  """Raises ValueError naming the first array whose dimension does not split evenly over
  its mesh axes (jax's own error names neither the parameter nor the config field):
  e.g. BERT's 30522-row vocabulary over a tensor axis of 4."""
  shapes = jax.tree_util.tree_leaves_with_path(abstract)
  specs = jax.tree_util.tree_leaves(logical_specs, is_leaf=lambda x: isinstance(x, P))
  shards = jax.tree_util.tree_leaves(shardings)
  if not len(shapes) == len(specs) == len(shards):
    return  # not a state built from boxed params: jax checks it when placing it
  for (path, leaf), names, sharding in zip(shapes, specs, shards):
    mesh_sizes = dict(sharding.mesh.shape)
    for i, (dim, axes) in enumerate(zip(leaf.shape, sharding.spec)):
      axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
      ways = math.prod(mesh_sizes[a] for a in axes)
      if dim % ways:
        name = names[i] if i < len(names) else None
        field = _SIZE_FIELDS.get(name, "the model size of that axis")
        padded = -(-dim // ways) * ways
        fix = (f"Pad the vocabulary: config.model.vocab_multiple=0 (128 x tensor, the "
               f"configs' default) or a multiple of {ways} (the padding rows are never an "
               "id)" if name == "vocab" else f"Make {field} a multiple of {ways} (e.g. {padded})")
        raise ValueError(
            f"{jax.tree_util.keystr(path)} of shape {tuple(leaf.shape)} (logical axes "
            f"{tuple(names)}): dimension {i} ('{name}', {dim}) does not split over mesh "
            f"axes {axes} ({ways} ways; config.mesh_shape resolved to "
            f"{tuple(mesh_sizes.values())}). {fix}, or change config.mesh_shape.")


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
  """Leading (batch) dimension over the data-parallel axes, the rest replicated."""
  return NamedSharding(mesh, P(BATCH_AXES, *([None] * (ndim - 1))))


@dataclasses.dataclass(frozen=True)
class RowShards:
  """How the processes of a mesh split a batch's rows: the loader's view of the mesh.

  The batch's rows are cut into `data_parallel_size` blocks (one per (data, fsdp) index),
  and a process must feed exactly the rows of the blocks its devices hold. Processes whose
  devices hold the same blocks (tensor parallelism across hosts, as on every pod with a
  tensor axis) form one row shard and load identical rows; `count` shards together load
  the global batch once. This replaces `process_count` / `process_index`, which are the
  shards only when no block spans processes (jax's own `get_process_index_and_count`
  reasons the same way).
  """

  count: int  # distinct row shards: batch_size / count rows per process
  index: int  # this process's shard, in the order of the blocks' rows
  hosts_per_block: int  # processes feeding (and holding) each batch block
  blocks_per_shard: int  # batch blocks each process holds
  processes: int
  leads: bool = True  # this process is its shard's first (it writes the shard's files)

  def describe(self) -> str:
    return (f"{self.processes} processes, {self.count} row shards (each block on "
            f"{self.hosts_per_block} host{'s' * (self.hosts_per_block > 1)}, "
            f"{self.blocks_per_shard} block{'s' * (self.blocks_per_shard > 1)} a host)")


def row_shards(mesh: Mesh, process_index: int | None = None) -> RowShards:
  """The RowShards of `mesh` seen from `process_index` (default this process).

  Works on any device list carrying process indices (a libtpu topology description too:
  bert_jax.aot reports a pod's layout before it is rented). Raises ValueError naming the
  mesh, the process count and what to change where processes hold overlapping but
  different sets of blocks, or different numbers of them: no loader can feed that layout
  without loading rows twice or splitting a block.
  """
  blocks = data_parallel_size(mesh)
  index_map = batch_sharding(mesh, 1).devices_indices_map((blocks,))
  held: dict[int, set[int]] = collections.defaultdict(set)
  for device, (rows,) in index_map.items():
    held[device.process_index].add(rows.start)
  pid = jax.process_index() if process_index is None else process_index
  return shards_of_blocks(held, pid, tuple(mesh.shape[a] for a in MESH_AXES))


def shards_of_blocks(held: dict[int, set[int]], pid: int, shape: tuple) -> RowShards:
  """RowShards from {process: the batch blocks its devices hold} (row_shards' core)."""
  sets = {p: frozenset(b) for p, b in held.items()}
  distinct = sorted(set(sets.values()), key=min)
  sizes = {len(b) for b in distinct}
  overlap = any(a & b for i, a in enumerate(distinct) for b in distinct[i + 1:])
  if len(sizes) > 1 or overlap:
    example = "; ".join(f"process {p}: blocks {sorted(b)}" for p, b in sorted(sets.items())[:4])
    raise ValueError(
        f"config.mesh_shape={shape} on {len(sets)} processes splits the batch's "
        "(data x fsdp) blocks unevenly "
        f"({example}{'; ...' if len(sets) > 4 else ''}): each process must hold whole "
        "blocks that no other process holds only in part. Choose config.mesh_shape so "
        "that tensor (x fsdp) devices of one block lie within one host or span whole "
        "hosts, e.g. tensor = the devices per host or a divisor of it.")
  if pid not in sets:
    raise ValueError(f"process {pid} holds no device of the mesh {shape}.")
  hosts = collections.Counter(sets.values())
  first = min(p for p, b in sets.items() if b == sets[pid])
  return RowShards(count=len(distinct), index=distinct.index(sets[pid]),
                   hosts_per_block=max(hosts.values()), blocks_per_shard=sizes.pop(),
                   processes=len(sets), leads=pid == first)


def host_to_global(batch: dict, mesh: Mesh, shards: RowShards | None = None) -> dict:
  """This process's rows of a batch (numpy) -> global jax.Arrays, rows over BATCH_AXES.

  The process's rows are those of its row shard (`row_shards`): every process of a shard
  passes the same rows, and the global batch has `shards.count` times as many rows as
  each passes (its true shape also when blocks span processes: without it jax would
  take the processes' rows as distinct and build a batch of the wrong size). Every other
  dimension is replicated.
  """
  count = (shards or row_shards(mesh)).count
  out = {}
  for k, v in batch.items():
    v = np.asarray(v)
    out[k] = jax.make_array_from_process_local_data(
        batch_sharding(mesh, v.ndim), v, (v.shape[0] * count,) + v.shape[1:])
  return out


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def data_parallel_size(mesh: Mesh) -> int:
  return int(np.prod([mesh.shape[a] for a in BATCH_AXES]))
