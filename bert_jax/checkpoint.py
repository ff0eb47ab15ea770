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
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as ocm

from bert_jax import data_checkpoint, paths

log = logging.getLogger(__name__)


class CheckpointMismatchError(ValueError):
  """The checkpoint holds a differently shaped model than the one being restored."""


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


def _item_handlers(state_handler=None) -> dict:
  return {"state": state_handler or ocp.StandardCheckpointHandler(),
          "meta": ocp.JsonCheckpointHandler(), "data": data_checkpoint.Handler()}


class Checkpointer:
  """CheckpointManager wrapper: save every N steps, keep the last K (+ the best)."""

  def __init__(self, directory: str, *, keep: int = 3, async_save: bool = True,
               best_metric: Optional[str] = None, best_mode: str = "max", row_shards=None):
    """row_shards: the loop's parallel.RowShards (the data iterator is saved per row
    shard); None: one shard per process."""
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
             "meta": ocp.args.JsonSave(dict(meta, step=int(step)))}
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

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  # --------------------------------------------------------------- restore
  def restore(self, abstract_state: Any, data_iterator=None, step: Optional[int] = None):
    """Restores the newest loadable checkpoint onto `abstract_state`'s shardings.

    Returns (state, meta, step) or None when the directory holds no checkpoint.
    Raises CheckpointMismatchError when a checkpoint's arrays differ in shape.
    """
    steps = [step] if step is not None else sorted(self.manager.all_steps(), reverse=True)
    unreadable = []  # newer steps that failed, moved aside once an older one restores
    for s in steps:
      try:
        check_compatible(self.state_metadata(s), abstract_state, f"{self.directory}/{s}")
        items = {"state": ocp.args.StandardRestore(abstract_state),
                 "meta": ocp.args.JsonRestore()}
        has_data = (self.directory / str(s) / "data").is_dir()
        if data_iterator is not None and has_data:
          items["data"] = data_checkpoint.Restore(data_iterator, self._data_layout)
        elif data_iterator is not None:
          log.warning("checkpoint %d has no data iterator state; the data stream restarts.", s)
        restored = self.manager.restore(s, args=ocp.args.Composite(**items))
      except (CheckpointMismatchError, data_checkpoint.DataLayoutError):
        raise
      except Exception as e:  # noqa: BLE001 - any read failure means "try an older one"
        why = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        log.warning("checkpoint step %d in %s could not be restored (%s)%s.", s,
                    self.directory, why, "" if step is not None else
                    "; falling back to the previous one")
        unreadable.append(s)
        continue
      # Only now that an older step restored: if every step failed alike (say, a changed
      # data pipeline), the cause is not the files, and nothing is renamed.
      for bad in unreadable:
        log.warning("moved the unreadable checkpoint step %d to %s.", bad, self._move_aside(bad))
      return restored["state"], restored["meta"], s
    if steps:
      raise RuntimeError(f"none of the checkpoints {steps} in {self.directory} could be restored.")
    return None

  def _move_aside(self, step: int) -> str:
    """Renames an unreadable step to `<step>.corrupt-<time>` (not a step to orbax any more),
    so the run that falls back past it can save that step again (orbax refuses to
    overwrite an existing step). Process 0 renames; every process then rereads."""
    src = self.directory / str(step)
    dst = self.directory / f"{step}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}"
    if jax.process_index() == 0 and src.exists():
      src.rename(dst)
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
      multihost_utils.sync_global_devices(f"checkpoint-{step}-moved-aside")
    self.manager.reload()
    return str(dst)

  def state_metadata(self, step: int):
    """The saved state's tree of array metadata (shapes, dtypes)."""
    meta = self.manager.item_metadata(step)
    tree = meta["state"] if "state" in meta else None
    if tree is None:
      raise FileNotFoundError(f"checkpoint {self.directory}/{step} has no readable state metadata")
    return tree


def _best_fn(metric: str, mode: str):
  """A checkpoint's metrics -> its score; one scored without `metric` ranks last."""
  worst = float("-inf") if mode == "max" else float("inf")
  return lambda m: float(m.get(metric, worst))


class _DropReadOnlyNote(logging.Filter):
  """orbax logs 'Given directory is read only=<dir>' for every read-only manager: what a
  user reads as a permission problem with their workdir (every CLI that loads one)."""

  def filter(self, record):
    return not str(record.msg).startswith("Given directory is read only")


def _reader(directory, item_handlers: dict, **options) -> ocp.CheckpointManager:
  """A read-only CheckpointManager of `directory` (creates nothing), without orbax's note."""
  absl_logger, note = logging.getLogger("absl"), _DropReadOnlyNote()
  absl_logger.addFilter(note)
  try:
    return ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(
        read_only=True, create=False, save_interval_steps=0, **options),  # 0: orbax's
                                 item_handlers=item_handlers)  # read-only value, no note
  finally:
    absl_logger.removeFilter(note)


# ------------------------------------------------------------- choosing a step
def checkpoint_steps(workdir: str):
  """(workdir/checkpoints as an epath, its saved steps ascending; [] when none)."""
  directory = paths.resolve(workdir) / "checkpoints"
  if not directory.is_dir():
    return directory, []
  return directory, sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def read_meta(step_dir) -> dict:
  """The meta item (task, config, model_config, tokenizer_dir) of one step directory."""
  return json.loads((paths.resolve(step_dir) / "meta" / "metadata").read_text())


def run_differences(saved: dict, this_run: dict) -> list[str]:
  """What makes a checkpoint's run another model than this one, from the two meta dicts
  (loop._meta: task, model_config, config): the task, each differing model field and the
  optimizer (its state is another tree), as "name=saved (this run: value)"."""
  def flat(meta):
    out = {"task": meta.get("task")}
    out.update({f"model.{k}": v for k, v in (meta.get("model_config") or {}).items()})
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


def select_step(directory, steps: list[int], which: str, train: dict) -> int:
  """The step `which` names among `steps` (ascending, not empty) of `directory`.

  which: "latest", a step number, or "best": the best by the run's train config
  (`best_metric`, `best_mode`), the newest when the run kept no best. ValueError
  names a step that is not there or an unknown word.
  """
  if which == "latest":
    return steps[-1]
  if which.isdigit():
    if int(which) not in steps:
      raise ValueError(f"--checkpoint {which}: {directory} has steps {steps}.")
    return int(which)
  if which != "best":
    raise ValueError(f"--checkpoint {which!r}: best, latest or a step number.")
  metric, mode = train.get("best_metric") or "", train.get("best_mode", "max")
  if not metric:
    return steps[-1]
  manager = _reader(directory, _item_handlers(), best_fn=_best_fn(metric, mode),
                    best_mode=mode)
  try:
    best = manager.best_step()
  finally:
    manager.close()
  return steps[-1] if best is None else best


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
  (layers/config.pad_rows). Anything else is left for check_compatible to judge."""
  from bert_jax.layers.config import pad_rows  # pylint: disable=g-import-not-at-top
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


# ---------------------------------------------------------------- inference loading
def load_task_params(path: str, task: str, family: str, alternative: str):
  """The params (numpy) of one of our checkpoints of `task`, for a run's init_from; a
  checkpoint of another task is one ValueError naming it (the shape check's listing of
  every missing array said nothing of why). family / alternative: what the message asks
  for, e.g. "a GPT", "a Hugging Face GPT-2 directory"."""
  _, params, _, meta = load_params_for_inference(path, return_meta=True)
  if meta.get("task") != task:
    raise ValueError(f"config.init_from {path} holds a {meta.get('task')!r} checkpoint, not "
                     f"{family}: give {family} workdir (task {task}){alternative}.")
  return params


def load_params_for_inference(path: str, with_params: bool = True, return_meta: bool = False):
  """(TransformerConfig, params as numpy, tokenizer dir or None) from one of our checkpoints.

  `path` is a workdir, its `checkpoints/` dir, or one step dir inside it. Without
  `with_params` only the metadata is read and params is None. With return_meta, the saved
  meta dict (task name, run config, ...) comes fourth.
  """
  from bert_jax.layers.config import TransformerConfig  # pylint: disable=g-import-not-at-top
  path = paths.resolve(path)
  if (path / "checkpoints").is_dir():
    path = path / "checkpoints"
  step = None
  if path.name.isdigit() and (path / "state").is_dir():
    step, path = int(path.name), path.parent
  manager = _reader(path, _item_handlers(ocp.PyTreeCheckpointHandler()))
  step = manager.latest_step() if step is None else step
  if step is None:
    raise FileNotFoundError(f"no bert_jax checkpoint found under {path}")
  meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
  if "model_config" not in meta:  # word2vec: its own trainer, no Transformer
    raise ValueError(f"{path}/{step} is a {meta.get('task', 'non-Transformer')!r} checkpoint:"
                     " it holds no Transformer model (no model_config in its meta).")
  model_config = TransformerConfig(**meta["model_config"])
  if not with_params:
    return ((model_config, None, meta.get("tokenizer_dir"), meta) if return_meta
            else (model_config, None, meta.get("tokenizer_dir")))
  state_meta = manager.item_metadata(step)["state"]
  restore_args = jax.tree_util.tree_map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray),
                                        state_meta)
  state = manager.restore(step, args=ocp.args.Composite(
      state=ocp.args.PyTreeRestore(restore_args=restore_args)))["state"]
  params = state["params"]
  if return_meta:
    return model_config, params, meta.get("tokenizer_dir"), meta
  return model_config, params, meta.get("tokenizer_dir")
