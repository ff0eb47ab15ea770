"""ClassificationTask: sequence classification or regression on the pooled [CLS] vector.

Data (config.data.source): "polarity" (embedded, offline) | "glue/<task>" (tfds) |
"file" (CSV / TSV / JSONL), read by data.py and featurized by features.py; scored by
the GLUE metric of the task (glue.py, tasks/finetune/metrics.py).
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from bert_jax.models import heads
from bert_jax.models.modernbert import ModernBertForSequenceClassification
from bert_jax.tasks.finetune import metrics as metrics_lib
from bert_jax.tasks.finetune import modernbert
from bert_jax.tasks.finetune.base import FinetuneTask, Split, labels_option
from bert_jax.tasks.finetune.classification import data
from bert_jax.tasks.finetune.classification import features as featurize_lib
from bert_jax.tasks.finetune.classification.glue import get_glue_task
from bert_jax.tasks.finetune.tfds import tfds_kwargs
from bert_jax.train import losses
from bert_jax.train.writer import log as log_line


class ClassificationTask(FinetuneTask):
  """Sequence classification (or regression) on the pooled [CLS] vector."""

  name = "classification"
  fields = FinetuneTask.fields + ("labels",)
  packable = True

  def __init__(self, config):
    src = config.data.source
    if src.startswith("glue/"):
      glue = get_glue_task(src)
      self.label_list, self.regression = glue.label_names, glue.is_regression
      self.metric_names = glue.metrics
    elif src == "polarity":
      self.label_list, self.regression = data.POLARITY_LABELS, False
      self.metric_names = ("accuracy",)
    elif src == "file":
      self.regression = bool(config.data.regression)
      self.metric_names = ("pearson", "spearman") if self.regression else ("accuracy",)
      self.label_list = None if self.regression else labels_option(config)
      if self.label_list is None and not self.regression:
        examples, _ = self._read_file(config, config.data.train_file)
        self.label_list = tuple(sorted({str(e.label) for e in examples}))
        log_line(f"classification: labels from {config.data.train_file}: {self.label_list}")
    else:
      raise ValueError(f"classification: data.source={src!r}; expected 'polarity', "
                       "'glue/<task>' or 'file'.")
    self.num_labels = 1 if self.regression else len(self.label_list)
    super().__init__(config)

  def build_model(self, model_config):
    if modernbert.is_modernbert(model_config):  # pools as model_config.pooling says
      return ModernBertForSequenceClassification(model_config, self.num_labels)
    return heads.BertForSequenceClassification(model_config, self.num_labels,
                                               self.config.get("pooling", "cls"))

  def _inputs(self, batch):
    inputs = super()._inputs(batch)
    if "example_starts" in batch:  # packed rows: one pooled vector per example slot
      inputs["example_starts"] = batch["example_starts"]
    return inputs

  def _read_file(self, config, path):
    d = config.data
    return self.read_file_once(path, lambda p: data.read_classification_file(
        p, d.text_a_key, d.text_b_key or None, d.label_key or None, d.file_format or None))

  def read(self, split: Split):
    src = self.config.data.source
    if src == "polarity":
      return data.load_polarity(split.dataset_split)
    if src.startswith("glue/"):
      return data.load_glue(src, split.dataset_split, **tfds_kwargs(self.config))
    return self._read_file(self.config, split.file)

  def featurize(self, examples, training: bool, source: str, unlabeled: bool = False):
    del training
    return featurize_lib.featurize_classification(
        examples, self.tokenizer, self.seq_len, self.label_list, self.regression,
        allow_unlabeled=unlabeled, source=source)

  def read_unlabeled(self, path):
    d = self.config.data
    return data.read_classification_file(path, d.text_a_key, d.text_b_key or None, None,
                                            d.file_format or None)

  def train_label_ids(self, features):
    return None if self.regression else (features["labels"], self.num_labels)

  def head_flops(self, seq_len):
    d = self.model_config.hidden_size
    # BERT's pooler on cls pooling; ModernBERT's head (dense) on either.
    cls = self.config.get("pooling", "cls") == "cls"
    pooler = 2 * d * d if cls or modernbert.is_modernbert(self.model_config) else 0
    return pooler + 2 * d * self.num_labels

  def loss_parts(self, out, batch):
    w = self.row_weights(batch)
    if self.regression:
      err = out["logits"][:, 0] - batch["labels"].astype(jnp.float32)
      return {"task": jnp.sum(w * err ** 2)}
    return {"task": self.classification_loss(out["logits"], batch["labels"], w,
                                             self.class_weights)}

  def metric_sums(self, out, batch):
    sums = super().metric_sums(out, batch)
    if not self.regression:
      sums["correct"] = losses.correct_count(out["logits"], batch["labels"],
                                             self.row_weights(batch))
    return sums

  def predict_outputs(self, out, batch):
    return dict(super().predict_outputs(out, batch), logits=out["logits"])

  def predictions(self, logits):
    return logits[:, 0] if self.regression else np.argmax(logits, axis=-1)

  def host_metrics(self, outputs):
    o = self.ordered(outputs)
    labels = self.eval_features["labels"][o["feature_index"]]
    preds = self.predictions(o["logits"])
    result = metrics_lib.named_metrics(self.metric_names, labels, preds)
    if not self.regression:
      result.setdefault("accuracy", metrics_lib.accuracy(labels, preds))
      # Per class over the whole label set (a class absent from both sides scores 0).
      prf = metrics_lib.precision_recall_f1(labels, preds, range(self.num_labels))
      result["macro_f1"] = float(np.mean(prf["f1"]))
      for i, name in enumerate(self.label_list):
        for k in ("precision", "recall", "f1", "support"):
          result[f"{k}/{name}"] = float(prf[k][i])
    return result

  def prediction_records(self, examples, features, outputs):
    o = self.ordered(outputs)
    for fi, logits in zip(o["feature_index"], o["logits"]):
      ex = examples[features["example_index"][fi]]
      rec = {"guid": ex.guid, "text_a": ex.text_a}
      if ex.text_b is not None:
        rec["text_b"] = ex.text_b
      if self.regression:
        rec["score"] = float(logits[0])
      else:
        p = np.exp(logits - logits.max())
        rec["label"] = str(self.label_list[int(np.argmax(logits))])
        rec["probabilities"] = {str(n): float(v) for n, v in zip(self.label_list, p / p.sum())}
      yield rec
