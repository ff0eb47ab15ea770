"""Orbax checkpoints: train state + data iterator + metadata, saved asynchronously.

Layout of a workdir: `checkpoints/<step>/{state,data,meta}`:
  state  the TrainState pytree (params, optimizer state, step, rng), sharded arrays;
  data   the grain iterator's state, one JSON per row shard (data_checkpoint.py: a
         resumed run sees the same stream it would have seen, on another process count
         too);
  meta   JSON: task, model config, config, step, phase.
Restores go straight onto the target shardings, so a checkpoint written on one mesh
or device count loads onto another. A step that fails to load (partial or corrupted)
is reported, moved aside to `<step>.corrupt-<time>` (nothing is deleted, and the rerun
can save that step again), and the previous one is tried; a checkpoint of another model
shape is a clear error, never a silent fallback.

With several processes every one restores the same step: the step list is process 0's,
and each step's outcome on every process is known to all before any uses it
(multihost.allgather), so a step one host cannot read makes all fall back together, and
only process 0 moves it aside. Reading without a run (inference, init_from, choosing a
step) lives in checkpoint_read.py; its names are re-exported here.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import json
import logging
import time
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as ocm

from bert_jax.checkpoint import data_state as data_checkpoint
from bert_jax.checkpoint import restore_errors
from bert_jax.checkpoint.restore_errors import (  # pylint: disable=unused-import
    CheckpointFormatError, CheckpointReadError, NoRestorableCheckpointError)
from bert_jax.runtime import multihost
from bert_jax.runtime import paths
# Reading without a run lives in checkpoint_read; its public names are re-exported here,
# where the CLIs and tasks have always called them (checkpoint.load_params_for_inference).
from bert_jax.checkpoint.read import (  # pylint: disable=unused-import
    _best_fn, _item_handlers, checkpoint_steps, load_params_for_inference, load_task_params,
    newest_meta, read_meta, select_step)

log = logging.getLogger(__name__)


class CheckpointMismatchError(ValueError):
  """The checkpoint holds a differently shaped model than the one being restored."""


# A restore verdict that stops every process (a shape mismatch, a data layout this run
# cannot continue: every process raises it), not a damaged file (every process then falls
# back): "stop: <error class>: <message>".
_STOP = "stop: "


# The errors that stop every process alike, by the name a verdict carries.
_STOPS = {"CheckpointMismatchError": CheckpointMismatchError,
          "DataLayoutError": data_checkpoint.DataLayoutError,
          "CheckpointReadError": CheckpointReadError,
          "CheckpointFormatError": CheckpointFormatError}


class CheckpointSaveError(OSError):
  """A save failed for want of space; the earlier checkpoints are untouched."""


@functools.cache
def _single_process_array_saves() -> None:
  """In one process, orbax's replica-parallel saving (on by default off GPU) only cuts each
  replicated shard into per-replica slices, each an XLA compile of its own, which this
  same process then writes: a first save of 20 small arrays on 8 CPU devices took 13.6 s
  instead of 0.5 s (under contention). Several processes keep it: each writes its share.
  Only how the arrays are read off the devices changes; the files are the same. Once per
  process (the registry is orbax's global one; no override warning)."""
  if jax.process_count() == 1:
    # pylint: disable=g-import-not-at-top
    from orbax.checkpoint._src.metadata import array_metadata_store
    from orbax.checkpoint._src.serialization import type_handler_registry
    type_handler_registry.GLOBAL_TYPE_HANDLER_REGISTRY.add(
        jax.Array, ocp.type_handlers.ArrayHandler(
            array_metadata_store=array_metadata_store.Store(), use_replica_parallel=False),
        override=True, ignore_warnings=True)


def check_keep(keep, field: str = "train.keep_checkpoints") -> None:
  """A ValueError naming `field` unless `keep` is an integer >= 1: orbax keeps the last
  `keep` steps, so 0 (or a negative value) would delete every checkpoint of the run."""
  if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
    raise ValueError(f"{field}={keep!r}; expected an integer >= 1 (the checkpoints to keep: "
                     "fewer would delete every checkpoint of the run).")


class Checkpointer:
  """CheckpointManager wrapper: save every N steps, keep the last K (+ the best)."""

  def __init__(self, directory: str, *, keep: int = 3, async_save: bool = True,
               best_metric: Optional[str] = None, best_mode: str = "max", row_shards=None):
    """row_shards: the loop's parallel.RowShards (the data iterator is saved per row
    shard); None: one shard per process."""
    check_keep(keep)  # before the manager exists: orbax's LatestN(0) deletes every step
    self._keep = keep
    self._data_layout = data_checkpoint.Layout.of(row_shards)
    self.directory = paths.resolve(directory)  # gs://bucket/run stays remote
    _single_process_array_saves()
    policies = [ocm.LatestN(n=keep)]
    best_fn = _best_fn(best_metric, best_mode) if best_metric else None
    if best_fn:
      policies.append(ocm.BestN(get_metric_fn=best_fn, n=1, reverse=(best_mode == "min"),
                                keep_checkpoints_without_metrics=False))
    # best_fn in the options too: without it orbax neither writes a step's metrics nor
    # answers best_step() with anything but the latest step.
    options = ocp.CheckpointManagerOptions(
        enable_async_checkpointing=async_save, create=True, best_fn=best_fn,
        best_mode=best_mode, preservation_policy=ocm.AnyPreservationPolicy(policies),
        cleanup_tmp_directories=True)
    # Handlers named up front, so metadata of existing steps is readable before a restore.
    self.manager = ocp.CheckpointManager(self.directory, options=options,
                                         item_handlers=_item_handlers())
    self._saving = None  # the step of the newest save (for errors surfacing later)

  # ------------------------------------------------------------------ save
  def save(self, step: int, state: Any, meta: dict, data_iterator=None,
           metrics: Optional[dict] = None) -> None:
    items = {"state": ocp.args.StandardSave(state),
             "meta": ocp.args.JsonSave(restore_errors.stamp(dict(meta, step=int(step))))}
    if data_iterator is not None:
      items["data"] = data_checkpoint.Save(data_iterator, self._data_layout)
    metrics = {k: float(v) for k, v in (metrics or {}).items()} or None
    self._saving = int(step)
    with self._space_check():
      self.manager.save(int(step), args=ocp.args.Composite(**items), metrics=metrics,
                        force=True)

  @contextlib.contextmanager
  def _space_check(self):
    """Turns a save that ran out of space (now, or in the async writer, seen at the next
    save/wait) into one CheckpointSaveError naming the directory and its free space."""
    try:
      yield
    except Exception as e:  # noqa: BLE001 - only ENOSPC is translated; the rest re-raised
      if not paths.out_of_space(e):
        raise
      free = paths.free_space(self.directory)
      raise CheckpointSaveError(
          errno.ENOSPC, f"checkpoint save of step {self._saving} failed: no space left on "
          f"device in {self.directory} ({free}). Saved steps {self.all_steps()} are intact; "
          "free space and run the same command again to resume.") from e

  def wait(self):
    with self._space_check():
      self.manager.wait_until_finished()

  def close(self):
    with self._space_check():
      self.manager.wait_until_finished()
    self.manager.close()

  def latest_step(self, agreed: bool = False) -> Optional[int]:
    """The newest saved step (None: none). agreed=True: the one every process will restore
    from (agreed_steps); every process must then call it."""
    if agreed:
      return (self.agreed_steps() or [None])[-1]
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def agreed_steps(self) -> list[int]:
    """The saved steps, ascending, as process 0 lists them: the same list on every process.
    Hosts can list a shared directory differently (a save still being committed, a
    lagging network filesystem); a step that another host cannot see then fails its
    restore there, and all fall back together (restore)."""
    lists = multihost.allgather("checkpoint-steps", self.all_steps())
    if any(other != lists[0] for other in lists):
      log.warning("the processes list different checkpoint steps in %s (%s); restoring from "
                  "process 0's.", self.directory,
                  "; ".join(f"process {i}: {steps}" for i, steps in enumerate(lists)))
    return lists[0]

  # --------------------------------------------------------------- restore
  def restore(self, abstract_state: Any, data_iterator=None, step: Optional[int] = None):
    """Restores the newest checkpoint every process can load onto `abstract_state`'s
    shardings.

    Every process tries the same step, and all learn every process's outcome before any
    uses it (multihost.allgather): a step that fails anywhere is skipped everywhere, so
    all restore the same older step (or all raise), never hosts on different steps.
    Returns (state, meta, step) or None when the directory holds no checkpoint.
    Raises CheckpointMismatchError when a checkpoint's arrays differ in shape, and
    data_checkpoint.DataLayoutError when its data stream cannot continue on this layout.
    """
    steps = [step] if step is not None else self.agreed_steps()[::-1]
    unreadable = []  # newer steps that failed, moved aside once an older one restores
    for s in steps:
      restored, why, stop = self._try_restore(s, abstract_state, data_iterator)
      verdicts = multihost.allgather("checkpoint-restore", why)  # "" = restored there
      if stop is not None:
        raise stop
      failed = [(i, v) for i, v in enumerate(verdicts) if v]
      for i, v in failed:
        if v.startswith(_STOP):  # another host cannot go on from here: all stop alike
          kind, message = v[len(_STOP):].split(": ", 1)
          raise _STOPS.get(kind, CheckpointMismatchError)(f"on process {i}: {message}")
      if failed:
        where = "" if len(verdicts) == 1 else f" on process {', '.join(str(i) for i, _ in failed)}"
        log.warning("checkpoint step %d in %s could not be restored%s (%s)%s.", s,
                    self.directory, where, failed[0][1], "" if step is not None else
                    "; falling back to the previous one")
        unreadable.append(s)
        continue
      # Only now that an older step restored: if every step failed alike (say, a changed
      # data pipeline), the cause is not the files, and nothing is renamed.
      for bad in unreadable:
        log.warning("moved the unreadable checkpoint step %d to %s.", bad, self._move_aside(bad))
      return restored["state"], restored["meta"], s
    if steps:
      raise NoRestorableCheckpointError(
          f"none of the checkpoints {steps} in {self.directory} could be restored (see the "
          "warnings above for each; nothing was moved): use a new --workdir, or move the "
          "damaged steps aside to train from the start.")
    return None

  def _try_restore(self, step: int, abstract_state: Any, data_iterator):
    """(restored or None, "" or why it failed here, the error that stops every process
    (CheckpointMismatchError, DataLayoutError) or None)."""
    where = f"{self.directory}/{step}"
    retry = functools.partial(restore_errors.retry, where=where)
    try:
      restore_errors.check_format(retry(lambda: read_meta(where)), where)
      check_compatible(retry(lambda: self.state_metadata(step)), abstract_state, where)
      items = {"state": ocp.args.StandardRestore(abstract_state),
               "meta": ocp.args.JsonRestore()}
      has_data = retry(lambda: (self.directory / str(step) / "data").is_dir())
      if data_iterator is not None and has_data:
        items["data"] = data_checkpoint.Restore(data_iterator, self._data_layout)
      elif data_iterator is not None:
        log.warning("checkpoint %d has no data iterator state; the data stream restarts.", step)
      return retry(lambda: self._read(step, ocp.args.Composite(**items))), "", None
    except tuple(_STOPS.values()) as e:
      return None, f"{_STOP}{type(e).__name__}: {e}", e
    except Exception as e:  # noqa: BLE001 - any read failure means "try an older one"
      return None, f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}", None

  def _read(self, step: int, args):
    """One step's items. With several processes, through orbax's handler itself: the
    manager's restore ends in a device barrier (orbax Checkpointer.restore) that a process
    whose read failed never reaches, so the others waited in it forever instead of
    learning of the failure (restore agrees through the coordination service instead)."""
    if jax.process_count() == 1:
      return self.manager.restore(step, args=args)
    handler = ocp.CompositeCheckpointHandler(**_item_handlers())
    try:
      return handler.restore(self.directory / str(step), args=args)
    finally:
      handler.close()

  def _move_aside(self, step: int) -> str:
    """Renames an unreadable step to `<step>.corrupt-<time>` (not a step to orbax any more),
    so the run that falls back past it can save that step again (orbax refuses to
    overwrite an existing step). Process 0 renames; every process then rereads."""
    src = self.directory / str(step)
    dst = self.directory / f"{step}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}"
    if jax.process_index() == 0 and src.exists():
      src.rename(dst)
      self._prune_moved_aside()
    dst = multihost.allgather("checkpoint-moved-aside", str(dst))[0]  # after the rename
    self.manager.reload()
    return dst

  def _prune_moved_aside(self) -> None:
    """Keeps the newest keep_checkpoints moved-aside steps (kept for a post-mortem), so a
    run that meets damaged steps again and again does not fill its disk with them."""
    aside = sorted((p for p in self.directory.iterdir() if ".corrupt-" in p.name),
                   key=lambda p: (p.name.split(".corrupt-", 1)[1],
                                  int(p.name.split(".", 1)[0]) if p.name.split(".", 1)[0]
                                  .isdigit() else -1))
    for old in aside[:-self._keep]:
      log.warning("removed the moved-aside checkpoint %s (more than keep_checkpoints=%d).",
                  old, self._keep)
      old.rmtree()

  def state_metadata(self, step: int):
    """The saved state's tree of array metadata (shapes, dtypes)."""
    meta = self.manager.item_metadata(step)
    tree = meta["state"] if "state" in meta else None
    if tree is None:
      raise FileNotFoundError(f"checkpoint {self.directory}/{step} has no readable state metadata")
    return tree


def run_differences(saved: dict, this_run: dict) -> list[str]:
  """What makes a checkpoint's run another model than this one, from the two meta dicts
  (loop._meta: task, model_config, config): the task, each differing model field and the
  optimizer (its state is another tree), as "name=saved (this run: value)"."""
  def flat(meta):
    out = {"task": meta.get("task")}
    from bert_jax.layers.config import RETIRED_FIELDS  # pylint: disable=g-import-not-at-top
    out.update({f"model.{k}": v for k, v in (meta.get("model_config") or {}).items()
                if k not in RETIRED_FIELDS})
    out["train.optimizer"] = ((meta.get("config") or {}).get("train") or {}).get("optimizer")
    return json.loads(json.dumps(out))  # tuples -> lists, as the saved JSON has them
  old, new = flat(saved), flat(this_run)
  if old["task"] != new["task"]:  # other tasks: their model fields say nothing more
    return [f"task={old['task']!r} (this run: {new['task']!r})"]
  return [f"{k}={old.get(k)!r} (this run: {new.get(k)!r})"
          for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def another_run_error(error: CheckpointMismatchError, step_dir, this_run: dict):
  """A resume's shape mismatch as one line naming what differs between the checkpoint's
  run and this one (`run_differences`), or `error` itself when the saved meta is
  unreadable or names no difference (its array listing then says what differs)."""
  try:
    changed = run_differences(read_meta(step_dir), this_run)
  except (OSError, ValueError):
    changed = []
  if not changed:
    return error
  return CheckpointMismatchError(
      f"checkpoint {step_dir} was saved by another run: {', '.join(changed)}. A workdir "
      "resumes its own run: use a new --workdir or the config it was saved with "
      "(--config.init_from=DIR takes only the params of a BERT checkpoint).")


def _shapes(tree) -> dict[str, tuple]:
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
    shape = getattr(leaf, "shape", None)
    if shape is not None:
      out[jax.tree_util.keystr(path)] = tuple(shape)
  return out


def check_compatible(saved_tree, abstract_tree, where: str) -> None:
  """Raises CheckpointMismatchError listing missing, unexpected and mis-shaped arrays."""
  saved, want = _shapes(_as_plain(saved_tree)), _shapes(_as_plain(abstract_tree))
  missing = sorted(set(want) - set(saved))
  unexpected = sorted(set(saved) - set(want))
  misshaped = sorted(k for k in set(saved) & set(want) if saved[k] != want[k])
  if missing or unexpected or misshaped:
    lines = [f"checkpoint {where} does not fit this model:"]
    lines += [f"  missing in checkpoint: {k} {want[k]}" for k in missing[:20]]
    lines += [f"  unexpected in checkpoint: {k} {saved[k]}" for k in unexpected[:20]]
    lines += [f"  shape mismatch: {k} checkpoint {saved[k]} vs model {want[k]}"
              for k in misshaped[:20]]
    if any(_is_vocab_rows(k) and saved[k][1:] == want[k][1:] for k in misshaped):
      lines.append("  (the vocabulary tables differ in rows: the model pads them to a multiple "
                   "of config.model.vocab_multiple, 0 = 128 x the tensor axis; a checkpoint "
                   "saved with other padding resumes with that padding, e.g. "
                   "--config.model.vocab_multiple=1 for one saved unpadded)")
    raise CheckpointMismatchError("\n".join(lines))


# Param paths whose leading dimension is the (padded) vocabulary: the token tables and the
# MLM output bias (TransformerConfig.padded_vocab).
_VOCAB_ROWS = ("['token_embedder']['embedding']", "['embedder']['embedding']",
               "['mlm_head']['bias']")


def _is_vocab_rows(key: str) -> bool:
  return any(key.endswith(name) for name in _VOCAB_ROWS)


def pad_vocab_rows(params, template):
  """params whose vocabulary tables have fewer rows than `template`'s (an HF model, or one
  of our checkpoints saved unpadded) with zero rows appended to the template's count
  (layers/param_layout.pad_rows). Anything else is left for check_compatible to judge."""
  from bert_jax.layers.param_layout import pad_rows  # pylint: disable=g-import-not-at-top
  want = _shapes(_as_plain(template))

  def pad(path, leaf):
    key, shape = jax.tree_util.keystr(path), getattr(leaf, "shape", None)
    target = want.get(key)
    if (shape is None or target is None or not _is_vocab_rows(key) or len(shape) != len(target)
        or shape[1:] != target[1:] or shape[0] >= target[0]):
      return leaf
    return pad_rows(leaf, target[0])
  return jax.tree_util.tree_map_with_path(pad, params)


def _as_plain(tree):
  """TrainState / metadata trees -> nested dicts, so paths compare across both."""
  if hasattr(tree, "shape") and not isinstance(tree, dict):
    return tree  # an array, ShapeDtypeStruct or orbax ArrayMetadata: a leaf
  if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
    return {f.name: _as_plain(getattr(tree, f.name)) for f in dataclasses.fields(tree)}
  if hasattr(tree, "_asdict"):
    return {k: _as_plain(v) for k, v in tree._asdict().items()}
  if isinstance(tree, dict) or hasattr(tree, "items"):
    return {str(k): _as_plain(v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return {str(i): _as_plain(v) for i, v in enumerate(tree)}
  return tree


