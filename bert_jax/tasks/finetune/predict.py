"""Predict mode of the fine-tuning tasks: a trained workdir + an input file -> JSONL.

  python -m bert_jax.main --config configs/finetune_classification.py:polarity \\
      --workdir workdirs/polarity --config.mode=predict \\
      --config.predict.input_file=texts.csv --config.predict.output_file=preds.jsonl

The workdir's best checkpoint (by train.best_metric) is used, else its newest, with what
the training run saved there: its tokenizer, label set (labels.json), max length,
packing and text columns (`task_config`), so no training file is needed. Inputs need
no labels: classification reads the config's text columns (CSV/TSV/JSONL), NER a
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
from bert_jax.tasks.finetune import workdir_labels
from bert_jax.layers.param_layout import scan_to_unrolled, unrolled_to_scan
from bert_jax.train import steps
from bert_jax.train.writer import log


# The data settings the trained model's inputs were made with, taken from the run's saved
# config rather than this command's: a config file's defaults need not be what the run
# was given (a run trained at max_seq_length 64 was predicted at 128). The command line
# keeps predict.* and the answer selection (SQuAD's n_best_size, max_answer_length,
# null_score_diff_threshold), which are choices of the prediction.
TRAINED_DATA = ("source", "regression", "max_seq_length", "packing", "max_examples_per_row",
                "packing_block", "text_a_key", "text_b_key", "file_format", "doc_stride",
                "max_query_length", "version_2_with_negative")


def checkpoint_step_dir(config: ml_collections.ConfigDict, workdir: str) -> str:
  """workdir/checkpoints/<step> of the best (by the run's train.best_metric) or else newest
  checkpoint.

  Read-only: a writable checkpoint manager's start-up cleanup could remove the temporary
  directory of a save in progress in the same workdir (a run still training).
  """
  directory, steps = checkpoint.checkpoint_steps(workdir)
  if not steps:
    raise FileNotFoundError(f"no checkpoint in {workdir}/checkpoints: train the task first "
                            "(the same command without --config.mode=predict).")
  saved = ((checkpoint.newest_meta(workdir) or {}).get("config") or {}).get("train")
  return str(directory / str(checkpoint.select_step(directory, steps, "best",
                                                    saved or config.train)))


def task_config(config: ml_collections.ConfigDict, step_dir: str,
                workdir: str) -> ml_collections.ConfigDict:
  """The config of the task to predict with: the encoder from `step_dir`, the tokenizer
  and label set the run saved in `workdir`, its TRAINED_DATA settings and pooling from the
  step's saved config; the rest (predict.*, the model's numerics) from `config`."""
  meta = checkpoint.read_meta(step_dir)
  if meta.get("task") != config.task:
    raise ValueError(f"predict: {step_dir} holds a {meta.get('task')!r} run, not "
                     f"{config.task!r}: predict with that task's config.")
  saved, cfg = meta.get("config") or {}, config.to_dict()
  data, trained = cfg["data"], saved.get("data") or {}
  changed = [f"data.{k}={trained[k]!r}" for k in TRAINED_DATA
             if k in trained and trained[k] != data.get(k)]
  data.update({k: trained[k] for k in TRAINED_DATA if k in trained})
  if "pooling" in saved and saved["pooling"] != cfg.get("pooling"):
    changed.append(f"pooling={saved['pooling']!r}")
    cfg["pooling"] = saved["pooling"]  # the head it trained: [CLS] pooler or mean
  tokenizer = paths.resolve(workdir) / "tokenizer"  # the run's copy, where the workdir is now
  data["vocab"] = str(tokenizer) if tokenizer.is_dir() else ""  # "": the meta's tokenizer_dir
  labels = workdir_labels.read(workdir)
  if labels is not None:
    data["labels"] = list(labels)  # names as saved (a comma string could split one)
  elif trained.get("labels"):
    data["labels"] = trained["labels"]  # the run was given its label set
  elif _labels_from_data(config.task, data):
    raise ValueError(
        f"predict: {workdir} has no {workdir_labels.FILE} (a run from before it was saved) "
        "and its run read the label set from its training file: pass that file again, "
        "--config.data.train_file=FILE, or the labels in id order, --config.data.labels=a,b")
  if changed:
    log(f"predict: the training run's settings (from {step_dir}): {', '.join(changed)}")
  cfg["init_from"] = step_dir
  return ml_collections.ConfigDict(cfg)


def _labels_from_data(task: str, data: dict) -> bool:
  """True when the task would read its label set from data.train_file, not given here."""
  reads = data.get("source") == "file" and not data.get("labels") and (
      task == "ner" or (task == "classification" and not data.get("regression")))
  return reads and not data.get("train_file")


def predict(config: ml_collections.ConfigDict, workdir: str, task, step_dir: str) -> str:
  """Writes config.predict.output_file (default workdir/predictions.jsonl); returns its path.

  `task` is a HostScored task built from `task_config(config, step_dir, workdir)`.
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
        f"{e}\n(predict builds the head from the workdir's labels.json and its run's "
        "saved config: was either changed after training?)") from None
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
