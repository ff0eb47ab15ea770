"""word2vec's own checkpoints: Orbax in workdir/checkpoints, resumable inside an epoch.

The default checkpoint_fn / restore_fn of train.train_and_evaluate. Besides the arrays
a checkpoint's meta holds the config and a hash of the vocabulary, so a rerun with other
data or another embed_dim is refused in one message instead of training on rows that
mean other words; tables padded for another mesh are re-padded to this one's.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Optional

import jax
import ml_collections
import numpy as np

from bert_jax.checkpoint import manager as ckpt_lib
from bert_jax.layers.param_layout import pad_rows
from bert_jax.train.writer import log


class WorkdirCheckpoints:
  """The default checkpoint_fn / restore_fn: Orbax checkpoints in workdir/checkpoints.

  Through bert_jax.checkpoint.manager.Checkpointer (keep-last-K, async saves, an unreadable step
  falls back to the previous one), meta = task, config, vocabulary. One at every epoch's
  end, and inside an epoch (every train.checkpoint_every_steps, and at a SIGTERM / Ctrl-C
  stop) with the stream's position in meta["position"] (`save`), from which a rerun goes
  on after that very batch. The arrays are the same either way, so checkpoints saved
  before positions existed restore as epoch ends.
  """

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, vocab, rows: int):
    t = config.train
    self.workdir = workdir
    self.ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"),
                                      keep=t.keep_checkpoints, async_save=t.async_checkpoints)
    self.meta = dict(task=config.task, config=config.to_dict(), vocab_size=len(vocab),
                     vocab_sha256=hashlib.sha256("\n".join(vocab.words).encode()).hexdigest(),
                     table_rows=rows, embed_dim=config.model.embed_dim)
    self.position: Optional[dict] = None  # the restored checkpoint's, if inside an epoch

  def save(self, step: int, state: dict, position: Optional[dict] = None) -> None:
    """position: None at an epoch's end; inside one, the last batch's "position"
    (data.SkipGramBatches.epoch) plus the epoch's "batches", "words" and "loss_sum" so far."""
    self.ckpt.save(step, state, dict(self.meta, position=position) if position else self.meta)

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
    rows = self.meta["table_rows"]
    saved_rows = (ckpt_lib.newest_meta(self.workdir) or {}).get("table_rows")
    repad = saved_rows is not None and saved_rows != rows and saved_rows >= self.meta[
        "vocab_size"]
    if repad:  # saved on a mesh that padded the tables to other rows: read them unsplit
      abstract = _with_table_rows(abstract, saved_rows)
    try:
      restored, meta, step = self.ckpt.restore(abstract)
    except ckpt_lib.CheckpointMismatchError as e:
      raise ckpt_lib.CheckpointMismatchError(f"word2vec: {e}\n{this_run}. {advice}") from e
    if repad:
      restored = _to_table_rows(restored, state, self.meta["vocab_size"])
      log(f"word2vec: checkpoint {self.ckpt.directory}/{step}'s tables have {saved_rows} rows "
          f"(padded for its mesh); re-padded to this mesh's {rows}")
    if meta.get("vocab_sha256", self.meta["vocab_sha256"]) != self.meta["vocab_sha256"]:
      # Same table shapes, other words: rows would silently mean other words.
      raise ckpt_lib.CheckpointMismatchError(
          f"word2vec: checkpoint {self.ckpt.directory}/{step} has another vocabulary "
          f"({meta.get('vocab_size')} words) than this run's; {this_run}. {advice}")
    changed = _config_changes(meta.get("config", {}), self.meta["config"])
    if changed:  # e.g. train.epochs: the learning-rate decay now spans another length
      log("word2vec: config changed since the checkpoint: " + ", ".join(changed))
    self.position = meta.get("position")
    return restored

  def close(self) -> None:
    self.ckpt.close()


def _with_table_rows(abstract: dict, rows: int) -> dict:
  """The abstract state with both tables at `rows` rows, their rows unsplit (`rows` need
  not divide this mesh's row axis); columns keep their sharding."""
  def table(a):
    mesh, spec = a.sharding.mesh, a.sharding.spec
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, *spec[1:]))
    return jax.ShapeDtypeStruct((rows,) + a.shape[1:], a.dtype, sharding=sharding)
  return dict(abstract, params={k: table(v) for k, v in abstract["params"].items()})


def _to_table_rows(restored: dict, like: dict, vocab_size: int) -> dict:
  """`restored`'s tables cut to the vocabulary's rows and zero-padded to `like`'s (the
  padding rows are never an index), on `like`'s shardings."""
  def table(saved, want):
    if not saved.is_fully_addressable:  # columns split over several processes
      from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
      saved = multihost_utils.process_allgather(saved, tiled=True)
    return jax.device_put(pad_rows(np.asarray(saved)[:vocab_size], want.shape[0]),
                          want.sharding)
  return dict(restored, params={k: table(restored["params"][k], like["params"][k])
                                for k in like["params"]})


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
