"""Reading saved checkpoints without a training run: the orbax item handlers (shared with
checkpoint.Checkpointer), read-only managers, a run's step list and meta, choosing a step
(latest / best / a number), and the params of a checkpoint for inference or init_from.

checkpoint.py re-exports these names: `checkpoint.load_params_for_inference` and the
rest stay the API that the CLIs and tasks call.
"""
from __future__ import annotations

import json
import logging

import jax
import numpy as np
import orbax.checkpoint as ocp

from bert_jax.checkpoint import data_state as data_checkpoint
from bert_jax.runtime import paths


def _item_handlers(state_handler=None) -> dict:
  return {"state": state_handler or ocp.StandardCheckpointHandler(),
          "meta": ocp.JsonCheckpointHandler(), "data": data_checkpoint.Handler()}


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


def newest_meta(workdir: str) -> dict | None:
  """The meta of the newest checkpoint in `workdir` whose meta reads (an older one when the
  newest is damaged: restore falls back the same way); None when none does. For settings
  a resumed run takes from its checkpoints before it builds anything (restore itself
  reports a bad checkpoint)."""
  directory, steps = checkpoint_steps(workdir)
  for step in reversed(steps):
    try:
      return read_meta(directory / str(step))
    except (OSError, ValueError):
      continue
  return None


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
  model_config = TransformerConfig.from_dict(meta["model_config"])
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
