"""Predict mode of the fine-tuning tasks: a trained workdir + an input file -> JSONL.

  python -m bert_jax.main --config configs/finetune_classification.py:polarity \\
      --workdir workdirs/polarity --config.mode=predict \\
      --config.predict.input_file=texts.csv --config.predict.output_file=preds.jsonl

The workdir's best checkpoint (by train.best_metric) is used, else its newest. Inputs
need no labels: classification reads the config's text columns (CSV/TSV/JSONL), NER a
JSONL of {"tokens": [...]} or plain text (one sentence per line, split on whitespace),
SQuAD a SQuAD-format JSON. Unusable records are counted and skipped (the summary says
which); the output is written to a temporary file first, so a failed run leaves an
existing output file as it was.
"""
from __future__ import annotations

import os
import pathlib

import flax.linen as nn
import jax
import ml_collections
import numpy as np

from bert_jax import checkpoint
from bert_jax.layers.stacks import scan_to_unrolled, unrolled_to_scan
from bert_jax.tasks import readers
from bert_jax.tasks.finetune_tasks import dumps
from bert_jax.tasks.ner import NerExample
from bert_jax.tasks.skiplog import SkipLog
from bert_jax.train.writer import log


def _checkpoint_step_dir(workdir: str, best_metric: str, best_mode: str) -> str:
  """workdir/checkpoints/<step> of the best (by best_metric) or else newest checkpoint."""
  ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), async_save=False,
                                 best_metric=best_metric or None, best_mode=best_mode)
  try:
    step = ckpt.manager.best_step() if best_metric else None
    step = step if step is not None else ckpt.latest_step()
  finally:
    ckpt.close()
  if step is None:
    raise FileNotFoundError(f"no checkpoint in {workdir}/checkpoints: train the task first "
                            "(the same command without --config.mode=predict).")
  return os.path.join(workdir, "checkpoints", str(step))


def _read_ner_input(path: str):
  if path.endswith((".jsonl", ".json")):
    return readers.read_ner_jsonl(path, tags_key=None)
  log_ = SkipLog(path)
  examples = []
  for n, line in enumerate(pathlib.Path(path).read_text(encoding="utf-8").splitlines(), 1):
    if line.strip():
      examples.append(NerExample(line.split(), None, f"{os.path.basename(path)}:{n}"))
    else:
      log_.skip("empty_text", f"line {n}")
  log_.kept = len(examples)
  return examples, log_


def read_input(task, path: str):
  """(examples, features) of an unlabeled input file for `task`."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"predict.input_file {path} does not exist.")
  d = task.config.data
  if task.name == "classification":
    examples, read_log = readers.read_classification_file(
        path, d.text_a_key, d.text_b_key or None, None, d.file_format or None)
  elif task.name == "ner":
    examples, read_log = _read_ner_input(path)
  else:
    examples, read_log = readers.read_squad_json(path)
  features, feat_log = task.featurize(examples, False, source=path, unlabeled=True)
  read_log.merge(feat_log).kept = feat_log.kept
  log(f"predict: {read_log.summary()}")
  if not len(features["input_ids"]):
    raise ValueError(f"predict: no usable records in {path} (see the summary above).")
  return examples, features


def predict(config: ml_collections.ConfigDict, workdir: str) -> str:
  """Writes config.predict.output_file (default workdir/predictions.jsonl); returns its path."""
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  tc = config.train
  step_dir = _checkpoint_step_dir(workdir, tc.get("best_metric") or "",
                                  tc.get("best_mode", "max"))
  # The task is rebuilt from the checkpoint itself: its encoder config and tokenizer.
  cfg = ml_collections.ConfigDict(config.to_dict())
  cfg.init_from = step_dir
  task = registry.get_task(cfg)
  _, params, _ = checkpoint.load_params_for_inference(step_dir)
  params = unrolled_to_scan(params) if task.model_config.scan_layers else \
      scan_to_unrolled(params)
  examples, features = read_input(task, config.predict.input_file)

  # The eval machinery serves the batches: every record once, fixed shapes (one compile).
  task.eval_features = features
  batches = list(task.eval_iterator({}, int(config.predict.batch_size), 0, 1))
  # A head of another shape (other labels, pooling) than this config's: a clear error.
  abstract = jax.eval_shape(lambda b: task.init(jax.random.key(0), b), batches[0])["params"]
  try:
    checkpoint.check_compatible(params, nn.unbox(abstract), step_dir)
  except checkpoint.CheckpointMismatchError as e:
    raise checkpoint.CheckpointMismatchError(
        f"{e}\n(predict with the config the workdir was trained with: same labels, "
        "pooling and model.)") from None
  fn = jax.jit(lambda p, b: task.predict_outputs(task.apply(p, b, None, train=False), b))
  outputs = [jax.device_get(fn(params, batch)) for batch in batches]
  outputs = {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]}

  out_path = config.predict.output_file or os.path.join(workdir, "predictions.jsonl")
  tmp = out_path + ".tmp"
  count = 0
  with open(tmp, "w", encoding="utf-8") as f:
    for record in task.prediction_records(examples, features, outputs):
      f.write(dumps(record) + "\n")
      count += 1
  os.replace(tmp, out_path)
  log(f"predict: {count} predictions from {step_dir} -> {out_path}")
  return out_path
