"""word2vec (skip-gram, negative sampling) training: `train_and_evaluate(config, workdir)`.

`python -m bert_jax.main --config configs/word2vec.py --workdir DIR` lands here; like
BERT's loop it writes TensorBoard + metrics.jsonl (train/writer.MetricWriter) and an
Orbax checkpoint per epoch (checkpoint.Checkpointer), and a rerun resumes from it.

The step is sparse: per SGD chunk of pairs it gathers the rows of T and C the chunk
touches, takes the SGNS gradient with respect to those rows (models/word2vec.row_grads)
and scatter-adds -lr * gradient back (`.at[idx].add`), so its cost is O(pairs * k * d),
independent of the vocabulary; there is no [V, d] gradient and no optimizer state.
One dispatched step scans over many chunks (a `fori_loop`), each chunk one SGD update on
the tables left by the previous one, like gensim's sequential updates, while the host
thread builds the next batch (data/word2vec.prefetch).

Sharding (shard_map over the (data, fsdp, tensor) mesh): pairs are split over the batch
axes; table rows over `tensor` and columns over `fsdp`, from the logical names
('vocab', 'embed') through parallel.LOGICAL_RULES. A device gathers the rows it owns
(psum over `tensor` fills the rest), sums partial dot products over `fsdp`, and applies
the row updates of every data shard to its own rows (all_gather over `data`). Every
collective carries O(pairs * d) values, never O(vocab).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import time
from typing import Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from bert_jax import checkpoint as ckpt_lib
from bert_jax import parallel
from bert_jax.data import word2vec as w2v_data
from bert_jax.models import word2vec as w2v_model
from bert_jax.tasks import word_similarity
from bert_jax.tasks.word2vec_export import save_word2vec_format
from bert_jax.visualize.projector import write_projector
from bert_jax.train.writer import MetricWriter

ROWS, COLS = "tensor", "fsdp"  # mesh axes of table rows / columns (checked against the rules)


def start_cpu_backend_single_threaded() -> bool:
  """Starts the XLA:CPU backend with a one-thread intra-op pool, if it has not started.

  XLA:CPU splits large loop fusions (the gathers and scatters here) over a thread pool
  sized by the CPUs the process may use when the backend starts. For word2vec's short
  fusions the split costs more CPU than it saves (measured on 2 cores: ~150 -> ~100 CPU ms
  per 131k pairs), and the second core is better spent building batches on the host.
  So the backend is started while the process may use one CPU, and every thread created
  meanwhile gets the full CPU set back. No-op when the backend is already up, without
  sched_setaffinity, or when the platform is not the CPU (JAX_PLATFORMS names another
  first, or, unset, an accelerator plugin is installed).

  Returns:
    whether the backend was started this way.
  """
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
  if xla_bridge.backends_are_initialized() or not hasattr(os, "sched_setaffinity"):
    return False
  platforms = jax.config.jax_platforms or os.environ.get("JAX_PLATFORMS", "")
  if platforms:
    if platforms.split(",")[0] != "cpu":
      return False
  elif (importlib.metadata.entry_points(group="jax_plugins")
        or importlib.util.find_spec("libtpu") is not None):
    return False  # an accelerator plugin is installed: the CPU is not the training device
  cpus = os.sched_getaffinity(0)
  one = {min(cpus)}
  before = set(os.listdir("/proc/self/task"))
  os.sched_setaffinity(0, one)
  try:
    jax.devices()
  finally:
    os.sched_setaffinity(0, cpus)
    for tid in set(os.listdir("/proc/self/task")) - before:
      try:
        os.sched_setaffinity(int(tid), cpus)
      except OSError:
        pass  # the thread has exited
  return True


def _table_spec() -> P:
  spec = nn.logical_to_mesh_axes(w2v_model.TABLE_AXES, parallel.LOGICAL_RULES)
  if tuple(spec) not in ((ROWS, COLS), (ROWS, None), (None, COLS), (None, None)):
    raise NotImplementedError(f"word2vec step supports rows on {ROWS!r} and columns on "
                              f"{COLS!r}; the rules map {w2v_model.TABLE_AXES} to {spec}.")
  return spec


def make_mesh(shape):
  """create_mesh over all devices, or over the first prod(shape) when no entry is -1
  (mesh_shape=(1, 1, 1): one device, e.g. with the 8 fake CPU devices of the tests)."""
  devices = jax.devices()
  if -1 not in tuple(shape):
    devices = devices[:int(np.prod(shape))]
  return parallel.create_mesh(shape, devices)


def padded_vocab_size(vocab_size: int, mesh) -> int:
  """Rows padded to a multiple of the row-sharding axis (the padding rows are never used)."""
  n = mesh.shape[ROWS]
  return -(-vocab_size // n) * n


def create_state(mesh, vocab_size: int, embed_dim: int, seed: int):
  """The training state {params: {target, context}, step, epoch}, created sharded.

  Returns (state, shardings). `eval_shape` -> logical specs -> jit(init, out_shardings):
  each device materialises only its own rows and columns.
  """
  if embed_dim % mesh.shape[COLS]:
    raise ValueError(f"embed_dim={embed_dim} must divide by the mesh's {COLS!r} axis "
                     f"({mesh.shape[COLS]}).")
  model = w2v_model.SkipGram(padded_vocab_size(vocab_size, mesh), embed_dim)
  ids = jnp.zeros((1,), jnp.int32)

  def init(key):
    params = model.init(key, ids, ids[:, None])["params"]
    return dict(params=params, step=jnp.int32(0), epoch=jnp.int32(0))

  boxed = jax.eval_shape(init, jax.random.key(seed))
  shardings = parallel.abstract_state_shardings(boxed, mesh)
  state = jax.jit(init, out_shardings=shardings)(jax.random.key(seed))
  return nn.unbox(state), nn.unbox(shardings)


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


# ----------------------------------------------------------------------------- the loop


class _EpochCheckpoints:
  """The default checkpoint_fn / restore_fn: Orbax checkpoints in workdir/checkpoints.

  One per epoch through bert_jax.checkpoint.Checkpointer (keep-last-K, async saves, an
  unreadable step falls back to the previous one), meta = task, config, vocabulary. The
  stream is seeded per epoch, so the state alone resumes the run: no data iterator item.
  """

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, vocab, rows: int):
    t = config.train
    self.ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"),
                                      keep=t.keep_checkpoints, async_save=t.async_checkpoints)
    self.meta = dict(task=config.task, config=config.to_dict(), vocab_size=len(vocab),
                     vocab_sha256=hashlib.sha256("\n".join(vocab.words).encode()).hexdigest(),
                     table_rows=rows, embed_dim=config.model.embed_dim)

  def save(self, step: int, state: dict) -> None:
    self.ckpt.save(step, state, self.meta)

  def restore(self, state: dict) -> Optional[dict]:
    """The newest checkpoint onto `state`'s shapes and shardings (so any mesh), or None."""
    if self.ckpt.latest_step() is None:
      return None
    abstract = jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state)
    this_run = (f"this run has a vocabulary of {self.meta['vocab_size']} words "
                f"({self.meta['table_rows']} table rows) and model.embed_dim="
                f"{self.meta['embed_dim']}")
    advice = (f"The checkpoints in {self.ckpt.directory} were trained with other data "
              "(data.corpus, data.text_glob, data.min_count) or another model.embed_dim: "
              "use a new --workdir, or the config they were saved with.")
    try:
      restored, meta, step = self.ckpt.restore(abstract)
    except ckpt_lib.CheckpointMismatchError as e:
      raise ckpt_lib.CheckpointMismatchError(f"word2vec: {e}\n{this_run}. {advice}") from e
    if meta.get("vocab_sha256", self.meta["vocab_sha256"]) != self.meta["vocab_sha256"]:
      # Same table shapes, other words: rows would silently mean other words.
      raise ckpt_lib.CheckpointMismatchError(
          f"word2vec: checkpoint {self.ckpt.directory}/{step} has another vocabulary "
          f"({meta.get('vocab_size')} words) than this run's; {this_run}. {advice}")
    changed = _config_changes(meta.get("config", {}), self.meta["config"])
    if changed:  # e.g. train.epochs: the learning-rate decay now spans another length
      _log("word2vec: config changed since the checkpoint: " + ", ".join(changed))
    return restored

  def close(self) -> None:
    self.ckpt.close()


def _config_changes(saved: dict, now: dict, prefix: str = "") -> list[str]:
  """`key old -> new` for the leaves that differ (JSON-normalized, tuples as lists)."""
  saved, now = json.loads(json.dumps(saved)), json.loads(json.dumps(now))
  out = []
  for k in sorted(set(saved) | set(now)):
    a, b = saved.get(k), now.get(k)
    if isinstance(a, dict) and isinstance(b, dict):
      out += _config_changes(a, b, f"{prefix}{k}.")
    elif a != b:
      out.append(f"{prefix}{k} {a} -> {b}")
  return out


def _abstract_batch(batches: w2v_data.SkipGramBatches, shardings: dict) -> dict:
  """ShapeDtypeStructs of one batch, for compiling the step before the first batch."""
  shapes = dict(centers=(batches.chunks, batches.chunk_size),
                contexts=(batches.chunks, batches.chunk_size),
                negatives=(batches.chunks, batches.chunk_size, batches.negatives),
                lr=(batches.chunks,), num_pairs=())
  dtypes = dict(centers=np.int32, contexts=np.int32, negatives=np.int32, lr=np.float32,
                num_pairs=np.int32)
  return {k: jax.ShapeDtypeStruct(shapes[k], dtypes[k], sharding=shardings[k]) for k in shapes}


def _mean_loss(losses, pairs: int, step: int) -> float:
  """Mean SGNS loss per pair of the summed step losses; raises on a non-finite value."""
  mean = float(sum(losses)) / max(pairs, 1)
  if not np.isfinite(mean):
    raise FloatingPointError(f"word2vec: non-finite loss by step {step}.")
  return mean


def _log(msg: str) -> None:
  if jax.process_index() == 0:
    print(msg, flush=True)


def export_vectors(workdir: str, words, vectors: np.ndarray, formats: str) -> list[str]:
  """Writes vectors.txt and/or vectors.bin (formats: text | binary | both | none)."""
  paths = []
  for fmt, name in (("text", "vectors.txt"), ("binary", "vectors.bin")):
    if formats in (fmt, "both"):
      path = os.path.join(workdir, name)
      save_word2vec_format(path, words, vectors, binary=fmt == "binary")
      paths.append(path)
  if formats != "none":  # + the TensorBoard projector files (visualize/projector.py)
    paths += write_projector(workdir, words, vectors)
  return paths


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                       log_fn: Optional[Callable[[int, dict], None]] = None,
                       checkpoint_fn: Optional[Callable[[int, dict], None]] = None,
                       restore_fn: Optional[Callable[[dict], Optional[dict]]] = None) -> dict:
  """Trains word2vec in `workdir`, resuming from its checkpoints; exports, evaluates.

  Without hooks (the command line): metrics to TensorBoard + metrics.jsonl (MetricWriter)
  and, with train.checkpoint, an Orbax checkpoint per epoch in workdir/checkpoints; a
  rerun resumes at the last saved epoch, and a finished run is only evaluated again.

  Args:
    config: configs/word2vec.py's ConfigDict.
    workdir: metrics, checkpoints and vectors.{txt,bin} go here.
    log_fn: log_fn(step, {name: value}) for training and evaluation scalars; replaces
      the MetricWriter.
    checkpoint_fn: checkpoint_fn(step, state), called after every epoch.
    restore_fn: restore_fn(initial_state) -> a saved state (same structure) or None;
      training resumes at the restored state's epoch (the data stream is seeded per epoch).
      Passing either of checkpoint_fn / restore_fn replaces the workdir checkpoints.

  Returns:
    dict(metrics={scores, words_per_sec, ...}, state=final state, word_vectors=WordVectors).
  """
  d, t = config.data, config.train
  if t.single_thread_xla_cpu:  # before anything starts the backend (process_count does)
    start_cpu_backend_single_threaded()
  if jax.process_count() > 1:
    raise NotImplementedError("word2vec trains in one process (any number of local devices); "
                              "its host pipeline does not shard the corpus over processes.")
  # ---- data: corpus, vocabulary, batches (host, numpy)
  start = time.time()
  sentences = w2v_data.load_corpus(d.corpus, d.text_glob)
  vocab = w2v_data.build_vocab(sentences, d.min_count)
  corpus = w2v_data.encode(sentences, vocab)
  _log(f"word2vec: {corpus.raw_words} words in {len(sentences)} sentences, vocabulary "
       f"{len(vocab)} (min_count {d.min_count}), {corpus.ids.shape[0]} in-vocabulary tokens "
       f"({time.time() - start:.1f}s)")
  mesh = make_mesh(config.mesh_shape)
  lanes = parallel.data_parallel_size(mesh)
  if t.chunk_size % lanes:
    raise ValueError(f"train.chunk_size={t.chunk_size} must divide by the {lanes} data shards.")
  batches = w2v_data.SkipGramBatches(
      corpus, vocab.counts, window=d.window, negatives=t.negatives, sample=d.sample,
      ns_exponent=t.ns_exponent, alpha=t.alpha, min_alpha=t.min_alpha, epochs=t.epochs,
      chunk_size=t.chunk_size, chunks=t.chunks_per_step, seed=config.seed)
  state, state_shardings = create_state(mesh, len(vocab), config.model.embed_dim, config.seed)

  # ---- outputs: metrics, checkpoints (closed however the run ends: pending saves finish)
  writer = MetricWriter(workdir) if log_fn is None else None
  log_fn = log_fn or writer.write_scalars
  ckpt = None
  if checkpoint_fn is None and restore_fn is None and t.checkpoint:
    ckpt = _EpochCheckpoints(config, workdir, vocab, padded_vocab_size(len(vocab), mesh))
    checkpoint_fn, restore_fn = ckpt.save, ckpt.restore
  try:
    return _train_export_evaluate(config, workdir, vocab, batches, mesh, state,
                                  state_shardings, log_fn, checkpoint_fn, restore_fn)
  finally:
    if ckpt is not None:
      ckpt.close()
    if writer is not None:
      writer.close()


def _train_export_evaluate(config, workdir, vocab, batches, mesh, state, state_shardings,
                           log_fn, checkpoint_fn, restore_fn) -> dict:
  """train_and_evaluate after the setup: restore, train the remaining epochs, export."""
  t = config.train
  # ---- state: the newest saved one, if any
  if restore_fn is not None:
    restored = restore_fn(state)
    if restored is not None:
      state = restored
      _log(f"word2vec: resumed at epoch {int(state['epoch'])}, step {int(state['step'])}")
  first_epoch = int(state["epoch"])
  finished = first_epoch >= t.epochs
  if finished:
    _log(f"word2vec: the saved run has finished its {first_epoch} epochs (train.epochs="
         f"{t.epochs}); evaluating it without training.")
  put = batch_shardings(mesh)
  # Compiled ahead (timed, reported as compile_seconds), so the training clock below
  # measures training; words_per_sec_with_compile adds it back.
  compile_start = time.time()
  step_fn = None if finished else make_train_step(mesh, state_shardings).lower(
      state, _abstract_batch(batches, put)).compile()
  compile_seconds = time.time() - compile_start

  # ---- train: the host thread builds the next batches (across epoch ends) while the
  # device runs this one; the first ones are built while the step compiles.
  step = int(state["step"])
  train_start = epoch_start = time.time()
  stream = () if finished else w2v_data.prefetch(batches.stream(first_epoch), t.prefetch)
  words_done = pairs_done = 0
  losses, ep_pairs, ep_words = [], 0, 0
  for epoch, batch in stream:
    if batch is not None:
      arrays = {k: jax.device_put(batch[k], put[k]) for k in put}
      state, loss = step_fn(state, arrays)
      step += 1
      losses.append(loss)
      ep_pairs += int(batch["num_pairs"])
      ep_words += batch["words"]
      if step % t.log_every_steps == 0:
        rate = (words_done + ep_words) / (time.time() - train_start)
        mean_loss = _mean_loss(losses, ep_pairs, step)
        lr = float(batch["lr"][-1])
        _log(f"epoch {epoch + 1}/{t.epochs} step {step} | loss {mean_loss:.4f} | lr {lr:.5f} "
             f"| {rate:,.0f} words/s")
        log_fn(step, dict(loss=mean_loss, learning_rate=lr, words_per_sec=rate))
      continue
    # End of an epoch.
    mean_loss = _mean_loss(losses, ep_pairs, step)   # waits for the epoch's last step
    words_done, pairs_done = words_done + ep_words, pairs_done + ep_pairs
    seconds = time.time() - epoch_start
    _log(f"epoch {epoch + 1}/{t.epochs} done: {ep_words} effective words, {ep_pairs} pairs, "
         f"loss {mean_loss:.4f}, {seconds:.1f}s, {ep_words / seconds:,.0f} words/s")
    state = dict(state, epoch=jax.device_put(np.int32(epoch + 1), state_shardings["epoch"]))
    log_fn(step, dict(epoch=epoch + 1, epoch_loss=mean_loss,
                      epoch_words_per_sec=ep_words / seconds))
    if checkpoint_fn is not None:
      checkpoint_fn(step, state)
    losses, ep_pairs, ep_words, epoch_start = [], 0, 0, time.time()
  train_seconds = time.time() - train_start

  # ---- export and evaluate (the target table T holds the word vectors)
  vectors = np.asarray(jax.device_get(state["params"]["target"]))[:len(vocab)]
  wv = word_similarity.WordVectors(vocab.words, vectors)
  results = dict(train_seconds=train_seconds, compile_seconds=compile_seconds,
                 effective_words=words_done, pairs=pairs_done,
                 words_per_sec=words_done / max(train_seconds, 1e-9),
                 words_per_sec_with_compile=words_done / max(train_seconds + compile_seconds,
                                                             1e-9),
                 **word_similarity.evaluate_all(wv, config.eval.restrict_vocab))
  log_fn(step, results)
  if jax.process_index() == 0:
    paths = export_vectors(workdir, vocab.words, vectors, config.export_format)
    _log("word2vec: " + ", ".join(f"{k} {v:.4g}" for k, v in results.items()) +
         (f"; vectors in {', '.join(paths)}" if paths else ""))
  return dict(metrics=results, state=state, word_vectors=wv)
