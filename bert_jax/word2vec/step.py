"""The word2vec train step: sparse SGNS updates of the sharded tables (shard_map).

The step is sparse: per SGD chunk of pairs it gathers the rows of T and C the chunk
touches, takes the SGNS gradient with respect to those rows (model.py) and
scatter-adds -lr * gradient back (`.at[idx].add`), so its cost is O(pairs * k * d),
independent of the vocabulary; there is no [V, d] gradient and no optimizer state.
One dispatched step scans over many chunks (a `fori_loop`), each chunk one SGD update on
the tables left by the previous one, like gensim's sequential updates.

Sharding (shard_map over the (data, fsdp, tensor) mesh): pairs are split over the batch
axes; table rows over `tensor` and columns over `fsdp`, from the logical names
('vocab', 'embed') through parallel.LOGICAL_RULES. A device gathers the rows it owns
(psum over `tensor` fills the rest), sums partial dot products over `fsdp`, and applies
the row updates of every data shard to its own rows (all_gather over `data`). Every
collective carries O(pairs * d) values, never O(vocab).
"""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from bert_jax.runtime import parallel
from bert_jax.word2vec import model as w2v_model

ROWS, COLS = "tensor", "fsdp"  # mesh axes of table rows / columns (checked against the rules)


def _table_spec() -> P:
  spec = nn.logical_to_mesh_axes(w2v_model.TABLE_AXES, parallel.LOGICAL_RULES)
  if tuple(spec) not in ((ROWS, COLS), (ROWS, None), (None, COLS), (None, None)):
    raise NotImplementedError(f"word2vec step supports rows on {ROWS!r} and columns on "
                              f"{COLS!r}; the rules map {w2v_model.TABLE_AXES} to {spec}.")
  return spec


def padded_vocab_size(vocab_size: int, mesh) -> int:
  """Rows padded to a multiple of the row-sharding axis (the padding rows are never used)."""
  n = mesh.shape[ROWS]
  return -(-vocab_size // n) * n


def abstract_state(mesh, vocab_size: int, embed_dim: int, seed: int,
                   init_scale: float = w2v_model.GENSIM4_INIT_SCALE):
  """(init fn, the state's ShapeDtypeStructs with their shardings, shardings), nothing
  materialised: what create_state builds, and what bert_jax.aot compiles against.
  init_scale: T's initial half-width times dim (config.model.init_scale)."""
  if embed_dim % mesh.shape[COLS]:
    raise ValueError(f"embed_dim={embed_dim} must divide by the mesh's {COLS!r} axis "
                     f"({mesh.shape[COLS]}).")
  model = w2v_model.SkipGram(padded_vocab_size(vocab_size, mesh), embed_dim, init_scale)
  ids = jnp.zeros((1,), jnp.int32)

  def init(key):
    params = model.init(key, ids, ids[:, None])["params"]
    return dict(params=params, step=jnp.int32(0), epoch=jnp.int32(0))

  abstract, shardings = parallel.sharded_abstract(jax.eval_shape(init, jax.random.key(seed)),
                                                 mesh)
  return init, abstract, shardings


def create_state(mesh, vocab_size: int, embed_dim: int, seed: int,
                 init_scale: float = w2v_model.GENSIM4_INIT_SCALE):
  """The training state {params: {target, context}, step, epoch}, created sharded.

  Returns (state, shardings). `eval_shape` -> logical specs -> jit(init, out_shardings):
  each device materialises only its own rows and columns.
  """
  init, _, shardings = abstract_state(mesh, vocab_size, embed_dim, seed, init_scale)
  state = jax.jit(init, out_shardings=shardings)(jax.random.key(seed))
  return nn.unbox(state), nn.unbox(shardings)


def check_chunk_size(chunk_size: int, mesh) -> None:
  """Every SGD chunk splits evenly over the data shards (batch_shardings)."""
  lanes = parallel.data_parallel_size(mesh)
  if chunk_size % lanes:
    raise ValueError(f"train.chunk_size={chunk_size} must divide by the {lanes} data "
                     f"shards of mesh {dict(mesh.shape)}.")


def abstract_batch(chunks: int, chunk_size: int, negatives: int, mesh) -> dict:
  """ShapeDtypeStructs of one batch, sharded: for compiling the step before any batch."""
  shardings = batch_shardings(mesh)
  shapes = dict(centers=((chunks, chunk_size), jnp.int32),
                contexts=((chunks, chunk_size), jnp.int32),
                negatives=((chunks, chunk_size, negatives), jnp.int32),
                lr=((chunks,), jnp.float32), num_pairs=((), jnp.int32))
  return {k: jax.ShapeDtypeStruct(shape, dtype, sharding=shardings[k])
          for k, (shape, dtype) in shapes.items()}


def batch_shardings(mesh) -> dict:
  """Pairs of each chunk over the batch axes; lr and the pair count replicated."""
  pairs = NamedSharding(mesh, P(None, parallel.BATCH_AXES))
  return dict(centers=pairs, contexts=pairs,
              negatives=NamedSharding(mesh, P(None, parallel.BATCH_AXES, None)),
              lr=parallel.replicated(mesh), num_pairs=parallel.replicated(mesh))


def _local_update(target, context, centers, contexts, negatives, lr, num_pairs, *, mesh):
  """Per device (inside shard_map): the SGD chunks of one batch on this table block.

  target/context [V / tensor, d / fsdp]; centers/contexts [chunks, b]; negatives
  [chunks, b, k] with b = chunk_size / (data * fsdp). Returns the tables and summed loss.
  """
  n_rows, n_cols, n_data = mesh.shape[ROWS], mesh.shape[COLS], mesh.shape["data"]
  chunks, b = centers.shape
  rows_here = target.shape[0]
  row0 = jax.lax.axis_index(ROWS) * rows_here if n_rows > 1 else 0
  # Global position of this device's pairs inside a chunk: batch axes are (data, fsdp).
  shard = jax.lax.axis_index("data") * n_cols + jax.lax.axis_index(COLS) if (
      n_data * n_cols > 1) else 0
  lane = shard * b + jnp.arange(b)                                     # [b]

  def gather(table, ids):  # rows ids of the full table, this block's columns
    if n_rows == 1:
      return table[ids]
    local = ids - row0
    mine = (local >= 0) & (local < rows_here)
    rows = table[jnp.where(mine, local, 0)] * mine[..., None]
    return jax.lax.psum(rows, ROWS)

  def scatter_add(table, ids, updates):
    if n_rows == 1:
      return table.at[ids].add(updates)
    local = ids - row0
    mine = (local >= 0) & (local < rows_here)
    # Rows other devices own go out of bounds and are dropped.
    return table.at[jnp.where(mine, local, rows_here)].add(updates, mode="drop")

  def chunk(s, carry):
    target, context, loss = carry
    ids = jnp.concatenate([centers[s][:, None], contexts[s][:, None], negatives[s]], 1)
    weights = (s * b * n_data * n_cols + lane < num_pairs).astype(jnp.float32)  # [b]
    if n_cols > 1:  # the fsdp group shares its pairs: each member holds some columns
      ids = jax.lax.all_gather(ids, COLS, tiled=True)                  # [b * fsdp, k + 2]
      weights = jax.lax.all_gather(weights, COLS, tiled=True)
    t = gather(target, ids[:, 0])                                      # [n, d_local]
    c = gather(context, ids[:, 1:])                                    # [n, k + 1, d_local]
    logits = w2v_model.pair_logits(t, c)
    if n_cols > 1:
      logits = jax.lax.psum(logits, COLS)                              # full dot products
    # SGD: the updates are -lr * gradient; folding -lr into d/dlogits saves a pass.
    g = w2v_model.logit_grads(logits, weights) * -lr[s]                # [n, k + 1]
    step_t = jnp.einsum("bk,bkd->bd", g, c)                            # [n, d_local]
    step_c = g[:, :, None] * t[:, None, :]                             # [n, k + 1, d_local]
    chunk_loss = jnp.sum(w2v_model.sgns_loss(logits, weights))
    if n_data > 1:  # every data shard's updates reach every replica of the rows
      ids, step_t, step_c = (jax.lax.all_gather(x, "data", tiled=True)
                             for x in (ids, step_t, step_c))
      chunk_loss = jax.lax.psum(chunk_loss, "data")
    target = scatter_add(target, ids[:, 0], step_t)
    context = scatter_add(context, ids[:, 1:], step_c)
    return target, context, loss + chunk_loss

  chunk_pairs = b * n_data * n_cols
  used = jnp.minimum(chunks, (num_pairs + chunk_pairs - 1) // chunk_pairs)  # skip empty chunks
  return jax.lax.fori_loop(0, used, chunk, (target, context, jnp.float32(0)))


def train_step(state: dict, batch: dict, mesh) -> tuple[dict, jax.Array]:
  """One batch of SGD chunks; returns the new state and the summed loss of its pairs."""
  table, pairs = _table_spec(), P(None, parallel.BATCH_AXES)
  update = jax.shard_map(
      functools.partial(_local_update, mesh=mesh), mesh=mesh,
      in_specs=(table, table, pairs, pairs, P(None, parallel.BATCH_AXES, None), P(), P()),
      out_specs=(table, table, P()), check_vma=False)
  params = state["params"]
  target, context, loss = update(params["target"], params["context"], batch["centers"],
                                 batch["contexts"], batch["negatives"], batch["lr"],
                                 batch["num_pairs"])
  return dict(params=dict(target=target, context=context), step=state["step"] + 1,
              epoch=state["epoch"]), loss


def make_train_step(mesh, state_shardings):
  """The one jit of train_step: sharded in and out, the state donated (tables in place)."""
  return jax.jit(functools.partial(train_step, mesh=mesh),
                 in_shardings=(state_shardings, batch_shardings(mesh)),
                 out_shardings=(state_shardings, parallel.replicated(mesh)),
                 donate_argnums=(0,))
