"""config.task -> the task, and the one dispatcher: predict, a trainer of its own, or the loop.

`main.run` calls `run(config, workdir)` (and config.export_hf's export around it);
nothing else chooses what runs.
A new task implements the Protocol of `tasks/base.py` in its own room (tasks/<family>/)
and adds one line to TASKS; the shared loop then trains it.
"""
from __future__ import annotations

import importlib

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
  shared loop, `train_and_evaluate(config, workdir, task)`. config.export_hf is
  main.run's (bert_jax/apps/export.py uses this registry, not the other way round).
  """
  mode = config.get("mode", "train")
  if mode not in MODES:
    raise ValueError(f"config.mode={mode!r}; expected one of {MODES}.")
  if mode == "predict":
    return _predict(config, workdir)
  if config.task in TRAINERS:
    return _load(*TRAINERS[config.task])(config, workdir)
  import jax  # pylint: disable=g-import-not-at-top
  from bert_jax.train import defaults  # pylint: disable=g-import-not-at-top
  defaults.resolve_platform(config, jax.default_backend(), workdir)
  task = get_task(config)
  from bert_jax.train.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top
  return train_and_evaluate(config, workdir, task)


def prepare_data(config: ml_collections.ConfigDict, beam=None, verbose: bool = True) -> list:
  """Prepares everything training `config` reads, trains nothing (`python -m
  bert_jax.prepare`); the prepared data of each phase. Here, not in the CLI module, so
  that callers do not define the CLI's absl flags (a second --config beside main's)."""
  if config.task == "lm":
    from bert_jax.tasks.lm import data as lm_data  # pylint: disable=g-import-not-at-top
    return [lm_data.prepare(config.data, verbose, beam=beam)]
  if config.task != "bert_pretraining":
    raise ValueError(f"config.task={config.task!r}: the preparation command serves "
                     "'bert_pretraining' (BERT MLM + NSP / MLM only) and 'lm' (GPT).")
  from bert_jax.data import prepare as prepare_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.pretraining import PretrainingTask  # pylint: disable=g-import-not-at-top
  task = PretrainingTask(config)
  return [prepare_lib.prepare(task.phase_data_config(dict(phase)), verbose, beam=beam)
          for phase in config.train.get("phases") or [{}]]


def _predict(config: ml_collections.ConfigDict, workdir: str) -> str:
  if config.task in TRAINERS or not task_class(config.task).host_scored:
    raise ValueError(f"config.mode='predict' is for the host-scored tasks "
                     f"{sorted(n for n in TASKS if task_class(n).host_scored)}, "
                     f"not {config.task!r}.")
  from bert_jax.tasks.finetune import predict  # pylint: disable=g-import-not-at-top
  step_dir = predict.checkpoint_step_dir(config, workdir)
  # The checkpoint's encoder; the run's labels, tokenizer and input settings (its workdir).
  task = get_task(predict.task_config(config, step_dir, workdir))
  return predict.predict(config, workdir, task, step_dir)
