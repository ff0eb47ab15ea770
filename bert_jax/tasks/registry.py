"""config.task -> the task, and the one dispatcher: predict, a trainer of its own, or the loop.

`main.py` parses flags and calls `run(config, workdir)`; nothing else chooses what runs.
A new task implements the Protocol of `tasks/base.py` in its own room (tasks/<family>/)
and adds one line to TASKS; the shared loop then trains it.
"""
from __future__ import annotations

import importlib
import os

import ml_collections

# name -> (module, class). Imported lazily so one task's deps don't load others'.
TASKS = {
    "bert_pretraining": ("bert_jax.tasks.pretraining", "PretrainingTask"),
    "classification": ("bert_jax.tasks.finetune.classification.task", "ClassificationTask"),
    "ner": ("bert_jax.tasks.finetune.ner.task", "NerTask"),
    "squad": ("bert_jax.tasks.finetune.squad.task", "SquadTask"),
    "translation": ("bert_jax.tasks.translation.task", "TranslationTask"),
    "lm": ("bert_jax.tasks.lm.task", "LmTask"),
}
# Trainers with a loop of their own (sparse updates, no TrainState): name -> (module, fn).
TRAINERS = {
    "word2vec": ("bert_jax.word2vec.train", "train_and_evaluate"),
}
MODES = ("train", "predict")


def _load(module: str, attr: str):
  return getattr(importlib.import_module(module), attr)


def task_class(name: str):
  if name not in TASKS:
    raise ValueError(f"config.task={name!r} has no task class; known: "
                     f"{sorted(TASKS) + sorted(TRAINERS)}")
  return _load(*TASKS[name])


def get_task(config: ml_collections.ConfigDict):
  """The task object of `config.task` (a tasks/base.py Task)."""
  return task_class(config.task)(config)


def run(config: ml_collections.ConfigDict, workdir: str):
  """Runs what the config asks for in `workdir`; returns the runner's result.

  config.mode "predict" (HostScored tasks): predictions for config.predict.input_file
  with the workdir's best checkpoint; a name in TRAINERS: its own trainer; else the
  shared loop, `train_and_evaluate(config, workdir, task)`; with config.export_hf, the
  finished run's best (else newest) checkpoint is then exported to <workdir>/hf
  (bert_jax/export.py), checked up front so a run that cannot be exported fails at once.
  """
  mode = config.get("mode", "train")
  if mode not in MODES:
    raise ValueError(f"config.mode={mode!r}; expected one of {MODES}.")
  if mode == "predict":
    return _predict(config, workdir)
  if config.get("export_hf"):
    _check_export(config, workdir)
  if config.task in TRAINERS:
    return _load(*TRAINERS[config.task])(config, workdir)
  import jax  # pylint: disable=g-import-not-at-top
  from bert_jax.train import defaults  # pylint: disable=g-import-not-at-top
  defaults.resolve_platform(config, jax.default_backend(), workdir)
  task = get_task(config)
  from bert_jax.train.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top
  result = train_and_evaluate(config, workdir, task)
  if config.get("export_hf") and not result.get("preempted"):
    _export_hf(workdir)
  return result


def _check_export(config: ml_collections.ConfigDict, workdir: str) -> None:
  from bert_jax import export  # pylint: disable=g-import-not-at-top
  del workdir  # local or gs://: workdir/hf is written through epath
  try:
    export.check_exportable(config, model=True)
  except export.ExportError as e:
    raise ValueError(f"config.export_hf=True: {e}") from None


def _export_hf(workdir: str) -> None:
  import jax  # pylint: disable=g-import-not-at-top
  from bert_jax import export  # pylint: disable=g-import-not-at-top
  from bert_jax.train.writer import log  # pylint: disable=g-import-not-at-top
  if jax.process_index() != 0:  # one writer; the checkpoints are all saved by now
    return
  output = os.path.join(workdir, "hf")
  try:
    architecture, step_dir = export.export(workdir, output, "best")
  except (ValueError, FileNotFoundError) as e:  # the checkpoints stay: export them later
    raise ValueError(f"config.export_hf: the run finished but its export failed: {e}") from None
  log(f"export_hf: {step_dir} -> {output} ({architecture}; transformers' from_pretrained "
      "loads it)")


def _predict(config: ml_collections.ConfigDict, workdir: str) -> str:
  if config.task in TRAINERS or not task_class(config.task).host_scored:
    raise ValueError(f"config.mode='predict' is for the host-scored tasks "
                     f"{sorted(n for n in TASKS if task_class(n).host_scored)}, "
                     f"not {config.task!r}.")
  from bert_jax.tasks.finetune import predict  # pylint: disable=g-import-not-at-top
  step_dir = predict.checkpoint_step_dir(config, workdir)
  task = get_task(predict.task_config(config, step_dir))  # the checkpoint's encoder
  return predict.predict(config, workdir, task, step_dir)
