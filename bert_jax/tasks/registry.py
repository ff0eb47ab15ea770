"""config.task -> task object. New tasks register here and plug into the same loop."""
from __future__ import annotations

import ml_collections

# name -> (module, class or function). Imported lazily so one task's deps don't load others'.
TASKS = {
    "bert_pretraining": ("bert_jax.tasks.pretraining", "PretrainingTask"),
    "classification": ("bert_jax.tasks.finetune_tasks", "ClassificationTask"),
    "ner": ("bert_jax.tasks.finetune_tasks", "NerTask"),
    "squad": ("bert_jax.tasks.finetune_tasks", "SquadTask"),
}
# Tasks with a loop of their own (sparse updates etc.): name -> (module, train_and_evaluate)
STANDALONE = {
    "word2vec": ("bert_jax.tasks.word2vec", "train_and_evaluate"),
}


def _load(module: str, attr: str):
  import importlib  # pylint: disable=g-import-not-at-top
  return getattr(importlib.import_module(module), attr)


def get_task(config: ml_collections.ConfigDict):
  if config.task not in TASKS:
    raise ValueError(f"config.task={config.task!r} has no task class; known: "
                     f"{sorted(TASKS) + sorted(STANDALONE)}")
  return _load(*TASKS[config.task])(config)


def standalone_trainer(name: str, mode: str = "train"):
  """The function main runs instead of the shared loop, or None.

  mode "predict" (fine-tuning configs) writes predictions with a trained workdir.
  """
  if mode == "predict":
    if name not in FINETUNING:
      raise ValueError(f"config.mode='predict' is for the fine-tuning tasks {FINETUNING}, "
                       f"not {name!r}.")
    return _load("bert_jax.tasks.predict", "predict")
  return _load(*STANDALONE[name]) if name in STANDALONE else None


FINETUNING = ("classification", "ner", "squad")
