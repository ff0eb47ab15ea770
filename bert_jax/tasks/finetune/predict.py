"""Predict mode of the fine-tuning tasks: a trained workdir + an input file -> JSONL.

  python -m bert_jax.main --config configs/finetune_classification.py:polarity \\
      --workdir workdirs/polarity --config.mode=predict \\
      --config.predict.input_file=texts.csv --config.predict.output_file=preds.jsonl

The workdir's best checkpoint (by train.best_metric) is used, else its newest. Inputs
need no labels: classification reads the config's text columns (CSV/TSV/JSONL), NER a
JSONL of {"tokens": [...]} or plain text (one sentence per line, split on whitespace),
SQuAD a SQuAD-format JSON. Unusable records are counted and skipped (the summary says
which); the output is written to a temporary file first, so a failed run leaves an
existing output file as it was. SQuAD also writes the official evaluation script's
inputs beside it: predictions.json (question id -> answer, "" for no answer) and, for
v2.0, null_odds.json (question id -> null score - best span score).
"""
from __future__ import annotations

import functools
import json
import os

import flax.linen as nn
import jax
import ml_collections
import numpy as np

from bert_jax.checkpoint import manager as checkpoint
from bert_jax.runtime import paths
from bert_jax.runtime import progress
from bert_jax.layers.param_layout import scan_to_unrolled, unrolled_to_scan
from bert_jax.train import steps
from bert_jax.train.writer import log


def checkpoint_step_dir(config: ml_collections.ConfigDict, workdir: str) -> str:
  """workdir/checkpoints/<step> of the best (by train.best_metric) or else newest checkpoint.

  Read-only: a writable checkpoint manager's start-up cleanup could remove the temporary
  directory of a save in progress in the same workdir (a run still training).
  """
  directory, steps = checkpoint.checkpoint_steps(workdir)
  if not steps:
    raise FileNotFoundError(f"no checkpoint in {workdir}/checkpoints: train the task first "
                            "(the same command without --config.mode=predict).")
  return str(directory / str(checkpoint.select_step(directory, steps, "best", config.train)))


def task_config(config: ml_collections.ConfigDict, step_dir: str) -> ml_collections.ConfigDict:
  """The config of the task to predict with: its encoder and tokenizer from `step_dir`."""
  cfg = ml_collections.ConfigDict(config.to_dict())
  cfg.init_from = step_dir
  return cfg


def predict(config: ml_collections.ConfigDict, workdir: str, task, step_dir: str) -> str:
  """Writes config.predict.output_file (default workdir/predictions.jsonl); returns its path.

  `task` is a HostScored task built from `task_config(config, step_dir)`.
  """
  out_path = str(paths.resolve(config.predict.output_file or
                               os.path.join(workdir, "predictions.jsonl")))
  # A task with an official evaluation script (SQuAD) also writes that script's input
  # files beside the JSONL; refused now, not after the model has run, if one of them
  # would replace the JSONL.
  official_names = getattr(task, "official_file_names", ())
  if os.path.basename(out_path) in official_names:
    raise ValueError(f"predict.output_file {out_path} has the name of an official file "
                     f"written beside it ({', '.join(official_names)}); choose another "
                     "name.")
  _, params, _ = checkpoint.load_params_for_inference(step_dir)
  params = unrolled_to_scan(params) if task.model_config.scan_layers else \
      scan_to_unrolled(params)
  examples, features = task.read_input(config.predict.input_file)

  # Fixed-shape batches, every record once: one compile.
  batches = list(task.predict_batches(features, int(config.predict.batch_size)))
  # A head of another shape (other labels, pooling) than this config's: a clear error.
  abstract = jax.eval_shape(lambda b: task.init(jax.random.key(0), b), batches[0])["params"]
  try:
    checkpoint.check_compatible(params, nn.unbox(abstract), step_dir)
  except checkpoint.CheckpointMismatchError as e:
    raise checkpoint.CheckpointMismatchError(
        f"{e}\n(predict with the config the workdir was trained with: same labels, "
        "pooling and model.)") from None
  fn = jax.jit(functools.partial(steps.predict_step, task=task))
  outputs = [jax.device_get(fn(params, batch))
             for batch in progress.bar(batches, desc="predict", unit="batch")]
  outputs = {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]}

  count = 0
  with _atomic(out_path) as f:
    for record in task.prediction_records(examples, features, outputs):
      f.write(json.dumps(record, ensure_ascii=False) + "\n")
      count += 1
  log(f"predict: {count} predictions from {step_dir} -> {out_path}")
  official = task.official_prediction_files(examples, features, outputs) \
      if official_names else {}
  for name, obj in official.items():
    path = str(paths.resolve(out_path).parent / name)
    with _atomic(path) as f:
      json.dump(obj, f, ensure_ascii=False, indent=1)
    log(f"predict: {name} ({len(obj)} entries, official evaluation format) -> {path}")
  return out_path


# A text file replacing path only when complete (local or gs://): a failed run leaves an
# existing file as it was.
_atomic = paths.open_text_atomically
