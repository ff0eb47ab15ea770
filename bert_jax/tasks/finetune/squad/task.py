"""SquadTask: span QA, start/end logits over doc-stride windows, n-best answers.

Data (config.data.source): "squad/v1.1" | "squad/v2.0" (tfds) | "file" (SQuAD JSON),
read by data.py, windowed by features.py; the best span per question comes from
postprocess.py and is scored by the official EM / F1 of metrics.py.
"""
from __future__ import annotations

import jax.numpy as jnp

from bert_jax.data import buckets
from bert_jax.models import heads
from bert_jax.tasks.finetune import bucketed
from bert_jax.tasks.finetune import modernbert
from bert_jax.tasks.finetune.base import FinetuneTask, Split
from bert_jax.tasks.finetune.squad import data
from bert_jax.tasks.finetune.squad import features as featurize_lib
from bert_jax.tasks.finetune.squad import metrics as squad_metrics
from bert_jax.tasks.finetune.squad.postprocess import postprocess_squad
from bert_jax.tasks.finetune.tfds import tfds_kwargs
from bert_jax.train import losses


# The official v2.0 keys reported beside exact_match / f1 (squad_metrics.squad_v2_scores).
V2_METRICS = ("HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_exact",
              "best_exact_thresh", "best_f1", "best_f1_thresh")


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
    # Batches padded to a few lengths, not all to max_seq_length (data/buckets.py).
    self.bucket_lengths = buckets.bucket_lengths(self.seq_len,
                                                 int(config.data.get("length_bucket", 0)))
    self.bucket_window = int(config.data.get("bucket_window", 32))
    if self.bucket_window < 1:
      raise ValueError(f"squad: data.bucket_window={self.bucket_window}; expected >= 1 "
                       "(train batches whose rows are sorted by length together).")

  def build_model(self, model_config):
    modernbert.refuse_squad(model_config)
    return heads.BertForQuestionAnswering(model_config)

  def read(self, split: Split):
    src = self.config.data.source
    if src == "file":
      if not split.file:
        raise ValueError("squad: data.source='file' needs data.train_file and data.eval_file.")
      return data.read_squad_json(split.file)
    return data.load_squad(src.split("/")[1], split.dataset_split, **tfds_kwargs(self.config))

  def featurize(self, examples, training: bool, source: str, unlabeled: bool = False):
    del unlabeled  # eval features carry no answer positions anyway
    d = self.config.data
    return featurize_lib.featurize_squad(examples, self.tokenizer, self.seq_len, d.doc_stride,
                                          d.max_query_length, training, source=source)

  def read_unlabeled(self, path):
    return data.read_squad_json(path, unlabeled=True)  # questions need no answers

  # ---------------------------------------------------- length-bucketed batches
  @property
  def bucketed(self) -> bool:
    return len(self.bucket_lengths) > 1

  def train_iterator(self, phase, batch_size, shard_index, shard_count, seed):
    if not self.bucketed:
      return super().train_iterator(phase, batch_size, shard_index, shard_count, seed)
    return bucketed.train_iterator(self.train_features, self.fields, self.bucket_lengths,
                                   batch_size, shard_index, shard_count, seed,
                                   self.bucket_window)

  def _batches(self, features, batch_size, shard_index, shard_count):
    if not self.bucketed:
      return super()._batches(features, batch_size, shard_index, shard_count)
    return bucketed.eval_iterator(features, self.fields, self.bucket_lengths, batch_size,
                                  shard_index, shard_count)

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
    # A bucket's logits [B, length] are padded back to [B, max_seq_length] with the
    # head's own padding logit, so batches of every bucket concatenate and the n-best
    # search sees exactly the padded path's values.
    pad = lambda x: jnp.pad(x, ((0, 0), (0, self.seq_len - x.shape[1])),
                            constant_values=heads.PADDING_LOGIT)
    return dict(super().predict_outputs(out, batch), start_logits=pad(out["start_logits"]),
                end_logits=pad(out["end_logits"]))

  def answers(self, examples, features, outputs):
    """postprocess_squad of these outputs. The last result is kept: predict mode asks
    twice for the same outputs (the JSONL, then the official files)."""
    key = (examples, features, outputs)
    cached = self.__dict__.get("_last_answers")
    if cached and all(a is b for a, b in zip(cached[0], key)):
      return cached[1]
    o = self.ordered(outputs)
    kept = {k: v[o["feature_index"]] for k, v in features.items()}
    d = self.config.data
    preds = postprocess_squad(examples, kept, o["start_logits"], o["end_logits"],
                              n_best_size=d.n_best_size, max_answer_length=d.max_answer_length,
                              version_2=self.version_2,
                              null_score_diff_threshold=d.null_score_diff_threshold)
    self._last_answers = (key, preds)
    return preds

  def host_metrics(self, outputs):
    preds = self.answers(self.eval_examples, self.eval_features, outputs)
    gold = data.squad_gold_answers(self.eval_examples)
    if not self.version_2:
      scores = squad_metrics.squad_v1_scores(gold, preds.texts)
      return {"exact_match": scores["exact_match"], "f1": scores["f1"]}
    # What the official script prints for our predictions.json with
    # `--na-prob-file null_odds.json --na-prob-thresh <our null_score_diff_threshold>`.
    scores = squad_metrics.squad_v2_scores(
        gold, preds.texts, na_probs=preds.null_score_diff,
        na_prob_thresh=float(self.config.data.null_score_diff_threshold))
    return {"exact_match": scores["exact"], "f1": scores["f1"],
            **{k: scores[k] for k in V2_METRICS if k in scores}}

  def prediction_records(self, examples, features, outputs):
    preds = self.answers(examples, features, outputs)
    for ex in examples:
      if ex.qid in preds.texts:
        yield {"id": ex.qid, "answer": preds.texts[ex.qid],
               "nbest": [{k: c[k] for k in ("text", "probability")}
                         for c in preds.nbest[ex.qid][:5]]}

  @property
  def official_file_names(self) -> tuple[str, ...]:
    """What predict mode writes beside its JSONL (`official_prediction_files`)."""
    return ("predictions.json", "null_odds.json") if self.version_2 else ("predictions.json",)

  def official_prediction_files(self, examples, features, outputs) -> dict:
    """The official evaluation script's inputs: predictions.json (qid -> answer text, ""
    for no answer) and, for v2.0, null_odds.json (qid -> null score - best span score;
    Infinity when a question has no valid span), as run_squad.py writes them:
      python evaluate-v2.0.py dev-v2.0.json predictions.json --na-prob-file null_odds.json
    """
    preds = self.answers(examples, features, outputs)
    files = {"predictions.json": preds.texts, "null_odds.json": preds.null_score_diff}
    return {name: files[name] for name in self.official_file_names}
