"""word2vec (skip-gram, negative sampling) training: `train_and_evaluate(config, workdir)`.

`python -m bert_jax.main --config configs/word2vec.py --workdir DIR` lands here (the
registry's TRAINERS: word2vec has no TrainState and no Task). Like BERT's loop it
writes TensorBoard + metrics.jsonl (train/writer.MetricWriter) and Orbax checkpoints
(checkpoints.py) at every epoch's end, every train.checkpoint_every_steps and at
a SIGTERM / Ctrl-C stop, and a rerun resumes from the newest, inside an epoch too. The
host thread builds the next batch (data.prefetch) while the device runs the sparse step
of step.py; at the end the vectors are exported and evaluated (vectors.py).

On several processes every host builds the same global batch from the seeded stream
(host work is not divided: the pairs are cheap next to the step) and `device_put` places
each host's blocks, so any mesh and process count train what one process trains
(scripts/multihost.py --tasks word2vec).
"""
from __future__ import annotations

import math
import time
from typing import Callable, Optional

import jax
import ml_collections
import numpy as np

from bert_jax.runtime import multihost
from bert_jax.runtime import parallel
from bert_jax.train import wandb_run
from bert_jax.train.preemption import Preemption
from bert_jax.train.writer import MetricWriter, log
from bert_jax.word2vec import checkpoints as w2v_checkpoints
from bert_jax.word2vec import data as w2v_data
from bert_jax.hardware import cpu_threads
from bert_jax.word2vec import model as w2v_model
from bert_jax.word2vec import schedule as w2v_schedule
from bert_jax.word2vec import step as step_lib
from bert_jax.word2vec import vectors as vectors_lib


# Settings that count something: below 1 there is nothing to train (embed_dim=0 was a
# ZeroDivisionError traceback out of the initializer).
_COUNTS = ("model.embed_dim", "data.min_count", "data.window", "train.epochs",
           "train.negatives", "train.chunks_per_step")


def check_counts(config: ml_collections.ConfigDict) -> None:
  """One ValueError naming the first count setting below 1, or the learning rate <= 0."""
  for key in _COUNTS:
    section, name = key.split(".")
    value = config[section][name]
    if not isinstance(value, int) or value < 1:
      raise ValueError(f"word2vec: {key}={value!r} must be an integer >= 1.")
  if not config.train.alpha > 0 or not config.train.min_alpha >= 0:
    raise ValueError(f"word2vec: train.alpha={config.train.alpha!r} must be > 0 and "
                     f"train.min_alpha={config.train.min_alpha!r} >= 0.")


def _to_host(table: jax.Array) -> np.ndarray:
  """The whole table on every process (its rows and columns live on several hosts)."""
  if jax.process_count() == 1:
    return np.asarray(jax.device_get(table))
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return np.asarray(multihost_utils.process_allgather(table, tiled=True))


def _mean_loss(losses, pairs: int, step: int) -> float:
  """Mean SGNS loss per pair of the summed step losses; raises on a non-finite value."""
  mean = float(sum(losses)) / max(pairs, 1)
  if not np.isfinite(mean):
    raise FloatingPointError(f"word2vec: non-finite loss by step {step}.")
  return mean


# The end-of-run results that are throughput (perf/*); the rest are scores (eval/*).
_PERF = ("train_seconds", "compile_seconds", "effective_words", "pairs", "words_per_sec",
         "words_per_sec_with_compile")


def _logged_names(results: dict) -> dict:
  """The writer's names (train/writer.py): perf/* for throughput, eval/* for scores."""
  return {(f"perf/{k}" if k in _PERF else f"eval/{k}"): v for k, v in results.items()}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                       log_fn: Optional[Callable[[int, dict], None]] = None,
                       checkpoint_fn: Optional[Callable[[int, dict], None]] = None,
                       restore_fn: Optional[Callable[[dict], Optional[dict]]] = None) -> dict:
  """Trains word2vec in `workdir`, resuming from its checkpoints; exports, evaluates.

  Without hooks (the command line): metrics to TensorBoard + metrics.jsonl (MetricWriter)
  and, with train.checkpoint, Orbax checkpoints in workdir/checkpoints at every epoch's
  end, every train.checkpoint_every_steps (0: none between) and at a SIGTERM / Ctrl-C
  stop; a rerun resumes right after the newest one's step, inside its epoch too (the same
  vectors as an uninterrupted run), and a finished run is only evaluated again.

  Args:
    config: configs/word2vec.py's ConfigDict.
    workdir: metrics, checkpoints and vectors.{txt,bin} go here.
    log_fn: log_fn(step, {name: value}) for training and evaluation scalars; replaces
      the MetricWriter.
    checkpoint_fn: checkpoint_fn(step, state), called after every epoch.
    restore_fn: restore_fn(initial_state) -> a saved state (same structure) or None;
      training resumes at the start of the restored state's epoch (the data stream is
      seeded per epoch; positions inside an epoch are the workdir checkpoints').
      Passing either of checkpoint_fn / restore_fn replaces the workdir checkpoints.

  Returns:
    dict(metrics={scores, words_per_sec, ...}, state=final state, word_vectors=WordVectors);
    stopped by SIGTERM / Ctrl-C: dict(metrics={}, state, word_vectors=None, step,
    preempted=True, stopped_by=the signal's name), nothing exported (the command then
    exits 0, or 130 for Ctrl-C).
  """
  d, t = config.data, config.train
  if t.single_thread_xla_cpu:  # before anything starts the backend (process_count does)
    cpu_threads.start_cpu_backend_single_threaded()
  # Settings checked before the corpus is read (seconds on a real corpus).
  w2v_schedule.check_lr_decay(t.lr_decay)
  w2v_model.check_init_scale(config.model.init_scale)
  check_counts(config)
  # ---- data: corpus, vocabulary, batches (host, numpy)
  start = time.time()
  sentences = w2v_data.load_corpus(d.corpus, d.text_glob)
  vocab = w2v_data.build_vocab(sentences, d.min_count)
  corpus = w2v_data.encode(sentences, vocab)
  log(f"word2vec: {corpus.raw_words} words in {len(sentences)} sentences, vocabulary "
       f"{len(vocab)} (min_count {d.min_count}), {corpus.ids.shape[0]} in-vocabulary tokens "
       f"({time.time() - start:.1f}s)")
  # mesh_shape without -1 takes the first prod(shape) devices ((1, 1, 1): one device).
  shape = tuple(config.mesh_shape)
  mesh = parallel.create_mesh(shape, None if -1 in shape else jax.devices()[:math.prod(shape)])
  step_lib.check_chunk_size(t.chunk_size, mesh)
  batches = w2v_data.SkipGramBatches(
      corpus, vocab.counts, window=d.window, negatives=t.negatives, sample=d.sample,
      ns_exponent=t.ns_exponent, alpha=t.alpha, min_alpha=t.min_alpha,
      lr_decay=t.lr_decay, epochs=t.epochs, chunk_size=t.chunk_size,
      chunks=t.chunks_per_step, seed=config.seed)
  state, state_shardings = step_lib.create_state(mesh, len(vocab), config.model.embed_dim,
                                                 config.seed, config.model.init_scale)

  # ---- outputs: metrics, checkpoints (closed however the run ends: pending saves finish)
  writer = (MetricWriter(workdir, wandb_run=wandb_run.start(config, workdir))
            if log_fn is None else None)
  log_fn = log_fn or writer.write_scalars
  ckpt = None
  if checkpoint_fn is None and restore_fn is None and t.checkpoint:
    ckpt = w2v_checkpoints.WorkdirCheckpoints(config, workdir, vocab,
                               step_lib.padded_vocab_size(len(vocab), mesh))
    checkpoint_fn, restore_fn = ckpt.save, ckpt.restore
  if writer is not None:  # each step logged once, also when a killed run is rerun
    restore_inner = restore_fn

    def restore_fn(state):  # pylint: disable=function-redefined
      restored = restore_inner(state) if restore_inner is not None else None
      writer.resume_at(int(restored["step"]) if restored is not None else 0)
      return restored
  try:
    out = _train_export_evaluate(config, workdir, vocab, batches, mesh, state,
                                 state_shardings, log_fn, checkpoint_fn, restore_fn, ckpt)
    if writer is not None and not out.get("preempted"):  # the config beside the scores
      writer.write_hparams(config.to_dict(), _logged_names(out["metrics"]))
    return out
  finally:
    if ckpt is not None:
      ckpt.close()
    if writer is not None:
      writer.close()


def _train_export_evaluate(config, workdir, vocab, batches, mesh, state, state_shardings,
                           log_fn, checkpoint_fn, restore_fn,
                           inside: Optional[w2v_checkpoints.WorkdirCheckpoints]) -> dict:
  """train_and_evaluate after the setup: restore, train the remaining epochs, export.
  inside: the workdir checkpoints, which also save and resume inside an epoch (None with
  the caller's hooks: those see epoch ends only)."""
  t = config.train
  # ---- state: the newest saved one, if any (and where in its epoch it was saved)
  position = None
  if restore_fn is not None:
    restored = restore_fn(state)
    if restored is not None:
      state = restored
      position = inside.position if inside is not None else None
      log(f"word2vec: resumed at epoch {int(state['epoch'])}, step {int(state['step'])}" +
          (f", after batch {position['batches']} of epoch {int(state['epoch']) + 1}"
           if position else ""))
  first_epoch = int(state["epoch"])
  finished = first_epoch >= t.epochs
  if finished:
    log(f"word2vec: the saved run has finished its {first_epoch} epochs (train.epochs="
         f"{t.epochs}); evaluating it without training.")
  put = step_lib.batch_shardings(mesh)
  # Compiled ahead (timed, reported as compile_seconds), so the training clock below
  # measures training; words_per_sec_with_compile adds it back.
  compile_start = time.time()
  step_fn = None if finished else step_lib.make_train_step(mesh, state_shardings).lower(
      state, step_lib.abstract_batch(batches.chunks, batches.chunk_size, batches.negatives,
                                     mesh)).compile()
  compile_seconds = time.time() - compile_start

  # ---- train: the host thread builds the next batches (across epoch ends) while the
  # device runs this one; the first ones are built while the step compiles.
  step = int(state["step"])
  train_start = epoch_start = time.time()
  stream = () if finished else w2v_data.prefetch(batches.stream(first_epoch, position),
                                                 t.prefetch)
  words_done = pairs_done = 0  # trained by this process (a resume's earlier part not counted)
  # The epoch so far: a resume inside it starts from the saved sums (the epoch's mean
  # loss then adds the same float32 terms in the same order as the uninterrupted run).
  losses, ep_pairs, ep_words, ep_batches = (
      ([position["loss_sum"]], position["pairs"], position["words"], position["batches"])
      if position else ([], 0, 0, 0))
  ep_resumed_words = ep_words  # the epoch's rate counts what this process trained
  # Saves inside an epoch: every train.checkpoint_every_steps, and the step a SIGTERM /
  # Ctrl-C stops after (several processes: the step they agree on, multihost.StopVote).
  # Made when the next batch of the same epoch arrives, so a step that ends an epoch is
  # saved once, as the epoch's end.
  every = int(t.get("checkpoint_every_steps", 0) or 0) if inside is not None else 0
  several = jax.process_count() > 1 and not finished
  agree = multihost.StopVote().cast if several else (lambda name: name)
  stopped_by, save_due, saved, last = "", False, "", None
  with Preemption(agreed=several) as preempt:
    for epoch, batch in stream:
      if batch is not None:
        if save_due:
          inside.save(step, state, dict(last, batches=ep_batches, words=ep_words,
                                        loss_sum=float(sum(losses))))
          save_due = False
          if stopped_by:
            saved = (f"saved step {step} (batch {ep_batches} of epoch {epoch + 1}): a rerun "
                     "resumes right after it.")
            break
        arrays = {k: jax.device_put(batch[k], put[k]) for k in put}
        state, loss = step_fn(state, arrays)
        step += 1
        losses.append(loss)
        ep_pairs += int(batch["num_pairs"])
        ep_words += batch["words"]
        ep_batches += 1
        words_done, pairs_done = words_done + batch["words"], pairs_done + int(batch["num_pairs"])
        last = batch["position"]
        if step % t.log_every_steps == 0:
          rate = words_done / (time.time() - train_start)
          mean_loss = _mean_loss(losses, ep_pairs, step)
          lr = float(batch["lr"][-1])
          log(f"epoch {epoch + 1}/{t.epochs} step {step} | loss {mean_loss:.4f} | lr "
              f"{lr:.5f} | {rate:,.0f} words/s")
          log_fn(step, {"train/loss": mean_loss, "train/learning_rate": lr,
                        "perf/words_per_sec": rate})
        save_due = save_due or bool(every and step % every == 0)
        stopped_by = agree(preempt.name)
        if stopped_by:
          preempt.stopping = True
          if inside is None:  # the caller's hooks save epoch ends only
            break
          save_due = True
        continue
      # End of an epoch (its checkpoint also serves a save that was due).
      mean_loss = _mean_loss(losses, ep_pairs, step)   # waits for the epoch's last step
      seconds = time.time() - epoch_start
      ep_rate = (ep_words - ep_resumed_words) / seconds
      log(f"epoch {epoch + 1}/{t.epochs} done: {ep_words} effective words, {ep_pairs} "
          f"pairs, loss {mean_loss:.4f}, {seconds:.1f}s, {ep_rate:,.0f} words/s")
      state = dict(state, epoch=jax.device_put(np.int32(epoch + 1), state_shardings["epoch"]))
      log_fn(step, {"train/epoch": epoch + 1, "train/epoch_loss": mean_loss,
                    "perf/epoch_words_per_sec": ep_rate})
      if checkpoint_fn is not None:
        checkpoint_fn(step, state)
      losses, ep_pairs, ep_words, ep_batches, epoch_start = [], 0, 0, 0, time.time()
      ep_resumed_words = 0
      save_due = False
      if stopped_by:
        saved = f"saved the end of epoch {epoch + 1} (step {step}): a rerun resumes there."
        break
  if stopped_by:
    jax.block_until_ready(state)
    if saved:
      rerun = saved
    elif checkpoint_fn is None:
      rerun = "no checkpoints (train.checkpoint=False): a rerun starts over."
    elif epoch == 0:
      rerun = "no epoch has finished yet: a rerun starts over."
    else:  # the caller's hooks: their checkpoints are the epochs' ends
      rerun = f"a rerun resumes from the checkpoint of epoch {epoch}, the start of this one."
    log(f"word2vec: {stopped_by}: stopped after step {step}, in epoch {epoch + 1}/{t.epochs}; "
        f"{rerun}")
    return dict(metrics={}, state=state, word_vectors=None, step=step, preempted=True,
                stopped_by=stopped_by)
  train_seconds = time.time() - train_start

  # ---- export and evaluate (the target table T holds the word vectors)
  vectors = _to_host(state["params"]["target"])[:len(vocab)]
  wv = vectors_lib.WordVectors(vocab.words, vectors)
  results = dict(train_seconds=train_seconds, compile_seconds=compile_seconds,
                 effective_words=words_done, pairs=pairs_done,
                 words_per_sec=words_done / max(train_seconds, 1e-9),
                 words_per_sec_with_compile=words_done / max(train_seconds + compile_seconds,
                                                             1e-9),
                 **vectors_lib.evaluate_all(wv, config.eval.restrict_vocab))
  log_fn(step, _logged_names(results))
  if jax.process_index() == 0:
    paths = vectors_lib.export_vectors(workdir, vocab.words, vectors, config.export_format)
    log("word2vec: " + ", ".join(f"{k} {v:.4g}" for k, v in results.items()) +
         (f"; vectors in {', '.join(paths)}" if paths else ""))
  return dict(metrics=results, state=state, word_vectors=wv)
