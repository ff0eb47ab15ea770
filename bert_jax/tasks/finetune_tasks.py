"""The fine-tuning tasks: sequence classification/regression, NER, SQuAD span QA.

Each reads its data (tfds catalog, local files, or the embedded polarity set),
featurizes it with the host-side code of its own module (classification.py, ner.py,
squad.py), puts a head on the encoder (models/heads.py) and scores the eval split with
the official metric definitions (metrics.py, squad_metrics.py). Skipped input is counted
and summarized (SkipLog), never a crash or a silent wrong label.

`config.data.source` picks the data:
  classification: "polarity" (embedded, offline) | "glue/<task>" (tfds) | "file"
  ner:            "conll2003" (tfds) | "file" (.jsonl or CoNLL columns)
  squad:          "squad/v1.1" | "squad/v2.0" (tfds) | "file" (SQuAD JSON)
"""
from __future__ import annotations

import json
from typing import Optional

import jax.numpy as jnp
import numpy as np

from bert_jax.models import heads
from bert_jax.tasks import classification as cls_lib
from bert_jax.tasks import metrics as metrics_lib
from bert_jax.tasks import ner as ner_lib
from bert_jax.tasks import readers, squad as squad_lib, squad_metrics, tfds_readers
from bert_jax.tasks.finetune import FinetuneTask, Split
from bert_jax.tasks.glue import get_glue_task
from bert_jax.tasks.squad_postprocess import postprocess_squad
from bert_jax.train import losses
from bert_jax.train.writer import log as log_line


def _labels_option(config) -> Optional[tuple]:
  text = config.data.get("labels") or ""
  return tuple(x.strip() for x in text.split(",") if x.strip()) or None


def _tfds_kwargs(config) -> dict:
  return dict(data_dir=config.data.get("tfds_data_dir") or None,
              download=bool(config.data.get("download", True)))


# ------------------------------------------------------------- classification
class ClassificationTask(FinetuneTask):
  """Sequence classification (or regression) on the pooled [CLS] vector."""

  name = "classification"
  fields = FinetuneTask.fields + ("labels",)

  def __init__(self, config):
    src = config.data.source
    if src.startswith("glue/"):
      glue = get_glue_task(src)
      self.label_list, self.regression = glue.label_names, glue.is_regression
      self.metric_names = glue.metrics
    elif src == "polarity":
      self.label_list, self.regression = readers.POLARITY_LABELS, False
      self.metric_names = ("accuracy",)
    elif src == "file":
      self.regression = bool(config.data.regression)
      self.metric_names = ("pearson", "spearman") if self.regression else ("accuracy",)
      self.label_list = None if self.regression else _labels_option(config)
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
    return heads.BertForSequenceClassification(model_config, self.num_labels,
                                               self.config.get("pooling", "cls"))

  def _read_file(self, config, path):
    d = config.data
    return self.read_file_once(path, lambda p: readers.read_classification_file(
        p, d.text_a_key, d.text_b_key or None, d.label_key or None, d.file_format or None))

  def read(self, split: Split):
    src = self.config.data.source
    if src == "polarity":
      return readers.load_polarity(split.name)
    if src.startswith("glue/"):
      return tfds_readers.load_glue(src, split.name, **_tfds_kwargs(self.config))
    return self._read_file(self.config, split.file)

  def featurize(self, examples, training: bool, source: str, unlabeled: bool = False):
    del training
    return cls_lib.featurize_classification(
        examples, self.tokenizer, self.seq_len, self.label_list, self.regression,
        allow_unlabeled=unlabeled, source=source)

  def read_unlabeled(self, path):
    d = self.config.data
    return readers.read_classification_file(path, d.text_a_key, d.text_b_key or None, None,
                                            d.file_format or None)

  def train_label_ids(self, features):
    return None if self.regression else (features["labels"], self.num_labels)

  def head_flops(self, seq_len):
    d = self.model_config.hidden_size
    pooler = 2 * d * d if self.config.get("pooling", "cls") == "cls" else 0
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
    result = {m: metrics_lib.METRIC_FNS[m](labels, preds) for m in self.metric_names}
    if not self.regression:
      result.setdefault("accuracy", metrics_lib.accuracy(labels, preds))
      # Per class over the whole label set (a class absent from both sides scores 0).
      prf = metrics_lib.precision_recall_f1(labels, preds, range(self.num_labels))
      result["macro_f1"] = float(np.mean(prf["f1"]))
      for i, name in enumerate(self.label_list):
        for k in ("precision", "recall", "f1"):
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


# ------------------------------------------------------------------------ NER
class NerTask(FinetuneTask):
  """Token classification: a tag per word, learned on each word's first sub-token."""

  name = "ner"
  fields = FinetuneTask.fields + ("labels", "label_weights")

  def __init__(self, config):
    src = config.data.source
    if src == "conll2003":
      self.label_list = tfds_readers.CONLL2003_NER_TAGS
    elif src == "file":
      self.label_list = _labels_option(config)
      if self.label_list is None:
        examples, _ = self._read_file(config, config.data.train_file)
        tags = sorted({t for e in examples for t in e.tags} - {"O"})
        self.label_list = ("O", *tags)
        log_line(f"ner: tags from {config.data.train_file}: {self.label_list}")
    else:
      raise ValueError(f"ner: data.source={src!r}; expected 'conll2003' or 'file'.")
    super().__init__(config)

  def build_model(self, model_config):
    return heads.BertForTokenClassification(model_config, len(self.label_list))

  def _read_file(self, config, path):
    del config
    return self.read_file_once(path, readers.read_ner_jsonl if path.endswith(
        (".jsonl", ".json")) else readers.read_conll_file)

  def read(self, split: Split):
    if self.config.data.source == "conll2003":
      return tfds_readers.load_conll2003(split.name, **_tfds_kwargs(self.config))
    return self._read_file(self.config, split.file)

  def featurize(self, examples, training: bool, source: str, unlabeled: bool = False):
    del training
    return ner_lib.featurize_ner(examples, self.tokenizer, self.seq_len, self.label_list,
                                 allow_unlabeled=unlabeled, source=source)

  def read_unlabeled(self, path):
    return readers.read_ner_input(path)

  def train_label_ids(self, features):
    return features["labels"][features["label_weights"] > 0], len(self.label_list)

  def head_flops(self, seq_len):
    return seq_len * 2 * self.model_config.hidden_size * len(self.label_list)

  def row_weights(self, batch):  # [batch, len]: first sub-tokens of real rows
    return batch["label_weights"].astype(jnp.float32) * batch["example_weight"][:, None]

  def loss_parts(self, out, batch):
    labels = jnp.maximum(batch["labels"], 0)  # ignored positions (-100) have weight 0
    return {"task": self.classification_loss(out["logits"], labels, self.row_weights(batch),
                                             self.class_weights)}

  def metric_sums(self, out, batch):
    sums = super().metric_sums(out, batch)
    sums["correct"] = losses.correct_count(out["logits"], jnp.maximum(batch["labels"], 0),
                                           self.row_weights(batch))
    return sums

  def predict_outputs(self, out, batch):
    return dict(super().predict_outputs(out, batch),
                predictions=jnp.argmax(out["logits"], axis=-1).astype(jnp.int32))

  def word_tags(self, features, outputs):
    o = self.ordered(outputs)
    fi = o["feature_index"]
    tags = ner_lib.predictions_to_words(o["predictions"], features["word_ids"][fi],
                                        self.label_list, features["num_words"][fi])
    return features["example_index"][fi], tags

  def host_metrics(self, outputs):
    index, pred = self.word_tags(self.eval_features, outputs)
    gold = [list(self.eval_examples[i].tags) for i in index]
    scores = metrics_lib.entity_scores(gold, pred)
    result = {k: float(scores[k]) for k in ("precision", "recall", "f1")}
    for t, s in scores["per_type"].items():
      result[f"f1/{t}"] = float(s["f1"])
    return result

  def prediction_records(self, examples, features, outputs):
    index, tags = self.word_tags(features, outputs)
    for i, t in zip(index, tags):
      yield {"guid": examples[i].guid, "tokens": list(examples[i].words), "tags": t}


# ---------------------------------------------------------------------- SQuAD
class SquadTask(FinetuneTask):
  """Span extraction: start/end logits over the tokens, doc-stride windows, n-best."""

  name = "squad"
  fields = FinetuneTask.fields + ("start_positions", "end_positions")  # train features only

  def __init__(self, config):
    src = config.data.source
    if src not in ("squad/v1.1", "squad/v2.0", "file"):
      raise ValueError(f"squad: data.source={src!r}; expected 'squad/v1.1', 'squad/v2.0' "
                       "or 'file'.")
    self.version_2 = src == "squad/v2.0" or bool(config.data.version_2_with_negative)
    super().__init__(config)

  def build_model(self, model_config):
    return heads.BertForQuestionAnswering(model_config)

  def read(self, split: Split):
    src = self.config.data.source
    if src == "file":
      if not split.file:
        raise ValueError("squad: data.source='file' needs data.train_file and data.eval_file.")
      return readers.read_squad_json(split.file)
    return tfds_readers.load_squad(src.split("/")[1], split.name, **_tfds_kwargs(self.config))

  def featurize(self, examples, training: bool, source: str, unlabeled: bool = False):
    del unlabeled  # eval features carry no answer positions anyway
    d = self.config.data
    return squad_lib.featurize_squad(examples, self.tokenizer, self.seq_len, d.doc_stride,
                                     d.max_query_length, training, source=source)

  def read_unlabeled(self, path):
    return readers.read_squad_json(path)

  def head_flops(self, seq_len):
    return seq_len * 2 * self.model_config.hidden_size * 2

  def loss_parts(self, out, batch):
    w = self.row_weights(batch)
    start = losses.softmax_cross_entropy(out["start_logits"], batch["start_positions"], w)
    end = losses.softmax_cross_entropy(out["end_logits"], batch["end_positions"], w)
    return {"task": 0.5 * (start + end)}

  def metric_sums(self, out, batch):
    sums = super().metric_sums(out, batch)
    hit = ((jnp.argmax(out["start_logits"], -1) == batch["start_positions"])
           & (jnp.argmax(out["end_logits"], -1) == batch["end_positions"]))
    sums["correct"] = jnp.sum(hit * self.row_weights(batch))   # exact span, per window
    return sums

  def predict_outputs(self, out, batch):
    return dict(super().predict_outputs(out, batch), start_logits=out["start_logits"],
                end_logits=out["end_logits"])

  def answers(self, examples, features, outputs):
    o = self.ordered(outputs)
    kept = {k: v[o["feature_index"]] for k, v in features.items()}
    d = self.config.data
    return postprocess_squad(examples, kept, o["start_logits"], o["end_logits"],
                             n_best_size=d.n_best_size, max_answer_length=d.max_answer_length,
                             version_2=self.version_2,
                             null_score_diff_threshold=d.null_score_diff_threshold)

  def host_metrics(self, outputs):
    preds = self.answers(self.eval_examples, self.eval_features, outputs)
    gold = readers.squad_gold_answers(self.eval_examples)
    if self.version_2:
      scores = squad_metrics.squad_v2_scores(gold, preds.texts)
      return {"exact_match": scores["exact"], "f1": scores["f1"]}
    scores = squad_metrics.squad_v1_scores(gold, preds.texts)
    return {"exact_match": scores["exact_match"], "f1": scores["f1"]}

  def prediction_records(self, examples, features, outputs):
    preds = self.answers(examples, features, outputs)
    for ex in examples:
      if ex.qid in preds.texts:
        yield {"id": ex.qid, "answer": preds.texts[ex.qid],
               "nbest": [{k: c[k] for k in ("text", "probability")}
                         for c in preds.nbest[ex.qid][:5]]}


def dumps(record: dict) -> str:
  return json.dumps(record, ensure_ascii=False)
