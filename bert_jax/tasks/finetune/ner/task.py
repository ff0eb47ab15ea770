"""NerTask: token classification, a tag per word learned on each word's first sub-token.

Data (config.data.source): "conll2003" (tfds) | "file" (.jsonl or CoNLL columns), read
by data.py; features.py aligns tags to sub-tokens and maps predictions back to words;
scored with seqeval's entity F1 (tasks/finetune/metrics.py), in seqeval's default
mode or, with config.ner_mode="strict", its strict IOB2 mode.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from bert_jax.models import heads
from bert_jax.models.modernbert import ModernBertForTokenClassification
from bert_jax.tasks.finetune import metrics as metrics_lib
from bert_jax.tasks.finetune import modernbert
from bert_jax.tasks.finetune.base import FinetuneTask, Split, labels_option
from bert_jax.tasks.finetune.ner import data
from bert_jax.tasks.finetune.ner import features as featurize_lib
from bert_jax.tasks.finetune.tfds import tfds_kwargs
from bert_jax.train import losses
from bert_jax.train.writer import log as log_line


class NerTask(FinetuneTask):
  """Token classification: a tag per word, learned on each word's first sub-token."""

  name = "ner"
  fields = FinetuneTask.fields + ("labels", "label_weights")
  packable = True

  def __init__(self, config):
    src = config.data.source
    if src == "conll2003":
      self.label_list = data.CONLL2003_NER_TAGS
    elif src == "file":
      self.label_list = labels_option(config)
      if self.label_list is None:
        examples, _ = self._read_file(config, config.data.train_file)
        tags = sorted({t for e in examples for t in e.tags} - {"O"})
        self.label_list = ("O", *tags)
        log_line(f"ner: tags from {config.data.train_file}: {self.label_list}")
    else:
      raise ValueError(f"ner: data.source={src!r}; expected 'conll2003' or 'file'.")
    # How entities are read from tags for the metrics: seqeval's default (conlleval-like,
    # an I- after O opens a chunk) or its strict IOB2 mode (only B-X I-X... chunks).
    self.entity_mode = config.get("ner_mode", "default")
    if self.entity_mode not in metrics_lib.ENTITY_MODES:
      raise ValueError(f"ner: ner_mode={self.entity_mode!r}; expected one of "
                       f"{metrics_lib.ENTITY_MODES}.")
    not_iob2 = [t for t in self.label_list if t[:1] not in ("O", "B", "I")]
    if self.entity_mode == "strict" and not_iob2:  # now, not at the first evaluation
      raise ValueError(f"ner: ner_mode='strict' reads IOB2 tags (O, B-X, I-X), but the "
                       f"label set has {not_iob2}; use ner_mode='default'.")
    super().__init__(config)

  def build_model(self, model_config):
    if modernbert.is_modernbert(model_config):
      return ModernBertForTokenClassification(model_config, len(self.label_list))
    return heads.BertForTokenClassification(model_config, len(self.label_list))

  def _read_file(self, config, path):
    del config
    return self.read_file_once(path, data.read_ner_jsonl if path.endswith(
        (".jsonl", ".json")) else data.read_conll_file)

  def read(self, split: Split):
    if self.config.data.source == "conll2003":
      return data.load_conll2003(split.dataset_split, **tfds_kwargs(self.config))
    return self._read_file(self.config, split.file)

  def featurize(self, examples, training: bool, source: str, unlabeled: bool = False):
    del training
    return featurize_lib.featurize_ner(examples, self.tokenizer, self.seq_len, self.label_list,
                                      allow_unlabeled=unlabeled, source=source)

  def read_unlabeled(self, path):
    return data.read_ner_input(path)

  def train_label_ids(self, features):
    return features["labels"][features["label_weights"] > 0], len(self.label_list)

  def head_flops(self, seq_len):
    d = self.model_config.hidden_size
    head = 2 * d * d if modernbert.is_modernbert(self.model_config) else 0  # its dense
    return seq_len * (head + 2 * d * len(self.label_list))

  def row_weights(self, batch):  # [batch, len]: first sub-tokens of real rows
    if "packed_segment_ids" in batch:  # packed: label_weights is 0 off the examples
      return batch["label_weights"].astype(jnp.float32)
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
    outputs = dict(super().predict_outputs(out, batch),
                   predictions=jnp.argmax(out["logits"], axis=-1).astype(jnp.int32))
    if "example_starts" in batch:  # packed rows: where each slot's tokens are
      outputs["example_starts"] = batch["example_starts"]
    return outputs

  @staticmethod
  def unpacked(features, outputs):
    """Packed predictions [rows, L] -> one row per slot [rows * K, L], each example's
    tokens from position 0 as in the padded features (the rest 0), so that `ordered`
    and the word mapping of the padded path apply."""
    if "example_starts" not in outputs:
      return outputs
    pred, fi = outputs["predictions"], outputs["feature_index"]
    k = len(fi) // len(pred)                                   # slots a row
    length = pred.shape[1]
    n = np.where(fi >= 0, features["input_mask"][np.maximum(fi, 0)].sum(axis=1), 0)
    t = np.arange(length)[None, :]                             # [1, L]
    src = np.minimum(outputs["example_starts"][:, None] + t, length - 1)  # [slots, L]
    rows = np.repeat(pred, k, axis=0)                          # [slots, L]
    tokens = np.where(t < n[:, None], np.take_along_axis(rows, src, axis=1), 0)
    return {"feature_index": fi, "predictions": tokens}

  def word_tags(self, features, outputs):
    o = self.ordered(self.unpacked(features, outputs))
    fi = o["feature_index"]
    tags = featurize_lib.predictions_to_words(o["predictions"], features["word_ids"][fi],
                                             self.label_list, features["num_words"][fi])
    return features["example_index"][fi], tags

  def host_metrics(self, outputs):
    index, pred = self.word_tags(self.eval_features, outputs)
    gold = [list(self.eval_examples[i].tags) for i in index]
    scores = metrics_lib.entity_scores(gold, pred, mode=self.entity_mode)
    result = {k: float(scores[k]) for k in ("precision", "recall", "f1")}
    for t, s in scores["per_type"].items():
      for k in ("precision", "recall", "f1", "support"):
        result[f"{k}/{t}"] = float(s[k])
    return result

  def prediction_records(self, examples, features, outputs):
    index, tags = self.word_tags(features, outputs)
    for i, t in zip(index, tags):
      yield {"guid": examples[i].guid, "tokens": list(examples[i].words), "tags": t}
