"""Task `translation`: a Vaswani Transformer or the GRU + additive-attention baseline,
trained with teacher forcing and scored by sacreBLEU on decoded text.

Training: the decoder reads the targets shifted right behind <s>; padding is masked out
of the loss (weights) and of attention (source mask; the causal mask hides later target
padding); the loss is label-smoothed cross-entropy per target token.
Evaluation is host-scored (tasks/base.py HostScored): `apply(train=False)` also runs the
jitted search of bert_jax/decoding.py (greedy, or beam with the GNMT length penalty) with
at most source length + `decode.max_extra_length` tokens per row, and `host_metrics`
detokenizes the hypotheses and scores corpus BLEU / chrF / exact match against the raw
references, plus teacher-forced token accuracy and perplexity. The best checkpoint is
kept by BLEU (train.best_metric). Eval and translate batches run in length buckets
(data.length_bucket > 0): rows sorted by length, each batch padded to the smallest
multiple of the step holding its longest source and target (one compile per shape),
results put back in the caller's order by feature_index; 0 pads every batch to
max_source/target_length as before.
"""
from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from bert_jax.data import buckets
from bert_jax.layers.config import TransformerConfig
from bert_jax.models import seq2seq
from bert_jax.runtime import paths as paths_lib
from bert_jax.tasks.translation import batches as batch_lib
from bert_jax.tasks.translation import data
from bert_jax.tasks.translation import metrics as metrics_lib
from bert_jax.train import losses
from bert_jax.train.defaults import transformer_config
from bert_jax.train.writer import log

ARCHITECTURES = ("transformer", "gru")


def model_config_of(config: ml_collections.ConfigDict) -> TransformerConfig:
  """The model's TransformerConfig; its vocabulary is data.vocab_size (one knob)."""
  return transformer_config(config).replace(vocab_size=int(config.data.vocab_size))


class TranslationTask:
  """Sentence-pair translation on the shared loop (tasks/base.py Task + HostScored)."""

  name = "translation"
  host_scored = True
  summary_keys = ("loss", "token_accuracy")
  progress_labels = (("token_accuracy", "acc"), ("perplexity", "ppl"))

  def __init__(self, config: ml_collections.ConfigDict):
    self.config = config
    self.architecture = config.get("architecture", "transformer")
    if self.architecture not in ARCHITECTURES:
      raise ValueError(f"config.architecture={self.architecture!r}; one of {ARCHITECTURES}.")
    d = config.data
    self.max_source, self.max_target = int(d.max_source_length), int(d.max_target_length)
    self.model_config = model_config_of(config)
    if max(self.max_source, self.max_target) > self.model_config.max_len:
      raise ValueError(f"data.max_source/target_length exceed model.max_len "
                       f"{self.model_config.max_len}.")
    if self.architecture != "transformer" and self.model_config.matmul_dtype:
      # The GRU's layers never read config.model: the setting would change nothing.
      raise ValueError(f"model.matmul_dtype={self.model_config.matmul_dtype!r} applies to the "
                       f"Transformer's matmuls; architecture={self.architecture!r} does not "
                       "use it (leave it unset).")
    # Eval/predict batches padded to a few lengths a side, not all to the maximum.
    step = int(d.get("length_bucket", 0) or 0)
    self.source_buckets = buckets.bucket_lengths(self.max_source, step)
    self.target_buckets = buckets.bucket_lengths(self.max_target, step)
    self.pack_length = int(d.get("pack_length", 0) or 0)
    if self.pack_length:
      if self.architecture != "transformer":
        raise ValueError("data.pack_length > 0 (packed rows) needs architecture='transformer'; "
                         "the GRU reads one pair a row (set data.pack_length=0).")
      if not max(self.max_source, self.max_target) <= self.pack_length <= (
          self.model_config.max_len):
        raise ValueError(
            f"data.pack_length={self.pack_length} must hold the longest pair "
            f"(max_source/target_length {self.max_source}/{self.max_target}) and be at most "
            f"model.max_len {self.model_config.max_len}.")
    self.model = self._build(deterministic=False)
    self.eval_model = self._build(deterministic=True)
    self.tokenizer = None
    self.tokenizer_dir: Optional[str] = None
    self.train_source = self.eval_source = None

  def _build(self, deterministic: bool):
    if self.architecture == "gru":
      from bert_jax.models.rnn import GRUConfig, GRUSeq2Seq  # pylint: disable=g-import-not-at-top
      g = self.config.gru
      return GRUSeq2Seq(GRUConfig(
          vocab_size=self.model_config.vocab_size, embed_dim=int(g.embed_dim),
          hidden_size=int(g.hidden_size), attention_units=int(g.attention_units),
          dropout_rate=self.model_config.dropout_rate, deterministic=deterministic))
    return seq2seq.Transformer(self.model_config.replace(deterministic=deterministic))

  # ------------------------------------------------------------------- data
  def load_tokenizer(self, tokenizer_dir: str, write: bool = False):
    """The vocabulary in `tokenizer_dir`, learned from the train split if it is not there."""
    d = self.config.data
    if d.source == "numbers":
      pairs = batch_lib.numbers_tokenizer_pairs(self.config.seed)
    else:
      pairs = lambda: batch_lib.read_split(d, "train")[0]
    self.tokenizer = batch_lib.load_or_train_tokenizer(d, tokenizer_dir, pairs, write)
    self.tokenizer_dir = tokenizer_dir
    if self.tokenizer.get_vocab_size() > self.model_config.vocab_size:
      raise ValueError(f"the vocabulary has {self.tokenizer.get_vocab_size()} ids, more "
                       f"than model.vocab_size {self.model_config.vocab_size}.")
    return self.tokenizer

  def prepare(self, workdir: str) -> None:
    d, lead = self.config.data, jax.process_index() == 0
    tok = self.load_tokenizer(str(paths_lib.resolve(workdir) / "tokenizer"), lead)  # or gs://
    if d.source == "numbers":
      self.train_source = batch_lib.NumberRows(data.split_numbers("train"), tok,
                                               self.max_source, self.max_target)
      eval_pairs, eval_log = data.numbers_pairs("validation", int(d.max_eval_examples))
      test_pairs, _ = data.numbers_pairs("test", int(d.num_test_examples))
      if lead:
        paths = batch_lib.write_test_files(test_pairs, str(paths_lib.resolve(workdir) / "data"),
                                           "test.de", "test.en")
        log(f"translation: numbers test split ({len(test_pairs)} pairs, never trained on) "
            f"in {paths[0]} / {paths[1]}")
    else:
      train_pairs, train_log = batch_lib.read_split(d, "train")
      self.train_source = batch_lib.Encoded(train_pairs, tok, self.max_source,
                                            self.max_target, train_log)
      log(f"translation train: {train_log.summary()}")
      eval_pairs, eval_log = batch_lib.read_split(d, "eval")
    self.eval_source = batch_lib.Encoded(eval_pairs, tok, self.max_source, self.max_target,
                                         eval_log)
    log(f"translation eval: {eval_log.summary()}")
    if not len(self.train_source):
      raise ValueError("translation: no usable training pairs (see the summary above).")

  def steps_per_epoch(self, batch_size: int) -> int:
    return max(1, math.ceil(len(self.train_source) / batch_size))

  def phase_shapes(self, phase: dict) -> dict:
    del phase
    if self.pack_length:
      return {"seq_len": 2 * self.pack_length, "num_predictions": 0}
    return {"seq_len": self.max_source + self.max_target, "num_predictions": 0}

  def train_iterator(self, phase, batch_size, shard_index, shard_count, seed):
    del phase
    if self.pack_length:
      return batch_lib.packed_train_batches(self.train_source, batch_size, self.pack_length,
                                            shard_index, shard_count, seed)
    return batch_lib.train_batches(self.train_source, batch_size, shard_index, shard_count,
                                   seed)

  def eval_iterator(self, phase, batch_size, shard_index, shard_count):
    del phase
    if not self.eval_source or not len(self.eval_source):
      raise ValueError("translation: no usable evaluation pairs (see the summary above).")
    return self._eval_batches(self.eval_source, batch_size, shard_index, shard_count)

  @property
  def bucketed(self) -> bool:
    return len(self.source_buckets) > 1 or len(self.target_buckets) > 1

  def _eval_batches(self, source, batch_size, shard_index, shard_count):
    if not self.bucketed:
      return batch_lib.eval_batches(source, batch_size, shard_index, shard_count)
    return batch_lib.bucketed_eval_batches(source, self.source_buckets, self.target_buckets,
                                           batch_size, shard_index, shard_count)

  def dummy_batch(self, batch_size: int, seq_len: int = 0, num_predictions: int = 0) -> dict:
    del seq_len, num_predictions
    return {"src_ids": np.full((batch_size, self.max_source), data.EOS, np.int32),
            "tgt_ids": np.full((batch_size, self.max_target), data.EOS, np.int32),
            "example_weight": np.ones(batch_size, np.float32),
            "feature_index": np.zeros(batch_size, np.int32)}

  # ------------------------------------------------------------------ model
  def init(self, rng, batch):
    src, tgt = jnp.asarray(batch["src_ids"]), jnp.asarray(batch["tgt_ids"])
    return self.model.init({"params": rng, "dropout": rng}, src,
                           seq2seq.shift_right(tgt, data.BOS))

  def apply(self, params, batch, rng, train: bool):
    """{"logits": [B, T, V]} (teacher forcing); eval adds {"hyp": [B, T]} decoded ids."""
    src = batch["src_ids"]                                             # [B, S]
    tgt_in = seq2seq.shift_right(batch["tgt_ids"], data.BOS)           # [B, T]
    model = self.model if train else self.eval_model
    rngs = {"dropout": rng} if train else {}
    packed = {}
    if "tgt_segment_ids" in batch:  # packed rows: every pair's decoder input starts at <s>
      tgt_in = jnp.where(batch["tgt_positions"] == 0, data.BOS, tgt_in)
      packed = {k: batch[k] for k in ("src_segment_ids", "tgt_segment_ids", "src_positions",
                                      "tgt_positions")}
    out = {"logits": model.apply({"params": params}, src, tgt_in, rngs=rngs, **packed)}
    beam = int(self.config.decode.eval_beam_size)
    if not train and beam:
      out["hyp"] = self.search(params, src, beam)
    return out

  def search(self, params, src_ids, beam_size: int, alpha: Optional[float] = None):
    """Decoded target ids [B, T] (best hypothesis, </s> then 0s) of src_ids [B, S]."""
    from bert_jax.tasks.translation import search  # pylint: disable=g-import-not-at-top
    dc = self.config.decode
    extra = int(dc.max_extra_length)
    # A row stops at min(max_target, its source length + extra) tokens and its source
    # fits the batch's S columns, so no row of it runs past S + extra: decoding (the
    # KV cache, the hypothesis buffers) only that far gives the same hypotheses, and
    # a short length bucket decodes a short buffer.
    max_len = min(self.max_target, src_ids.shape[1] + extra)
    hyp = search.translate_ids(
        self.eval_model, self.architecture, params, src_ids, beam_size=beam_size,
        alpha=float(dc.alpha if alpha is None else alpha), max_len=max_len,
        max_extra_length=extra)                                        # [B, max_len]
    return jnp.pad(hyp, ((0, 0), (0, self.max_target - max_len)), constant_values=data.PAD)

  def _token_weights(self, batch):
    return (batch["tgt_ids"] > 0).astype(jnp.float32) * batch["example_weight"][:, None]

  def loss_weights(self, batch):
    return {"translation": jnp.sum(self._token_weights(batch))}

  def loss_parts(self, out, batch):
    return {"translation": losses.softmax_cross_entropy(
        out["logits"], batch["tgt_ids"], self._token_weights(batch),
        label_smoothing=float(self.config.train.label_smoothing))}

  def metric_sums(self, out, batch):
    w = self._token_weights(batch)
    return {"nll": losses.softmax_cross_entropy(out["logits"], batch["tgt_ids"], w),
            "correct": losses.correct_count(out["logits"], batch["tgt_ids"], w),
            "tokens": jnp.sum(w)}

  @staticmethod
  def metric_ratios(sums):
    n = jnp.maximum(sums["tokens"], 1e-9)
    nll = sums["nll"] / n
    return {"token_accuracy": sums["correct"] / n, "nll": nll,
            "perplexity": jnp.exp(jnp.minimum(nll, 30.0))}

  def flops_per_example(self, seq_len: int, num_predictions: int = 0) -> float:
    """3x the forward matmul FLOPs: encoder over S tokens, decoder (self + cross
    attention) and the output projection over T tokens (nanoGPT-style estimate)."""
    del seq_len, num_predictions
    s, t, c = self.max_source, self.max_target, self.model_config
    if self.pack_length:  # a packed row attends over its whole length
      s = t = self.pack_length
    if self.architecture == "gru":
      g = self.config.gru
      h, e, u = int(g.hidden_size), int(g.embed_dim), int(g.attention_units)
      enc = 2 * 2 * 3 * h * (e + h)                                    # both directions
      dec = (2 * 3 * h * (e + 3 * h) + 2 * s * u + 2 * u * (3 * h) + 2 * s * 2 * h
             + 2 * e * (3 * h + e) + 2 * e * c.vocab_size)
      return 3.0 * (s * enc + t * dec)
    d, w = c.hidden_size, c.num_heads * c.d_head
    dec_cfg = c.replace(num_layers=c.num_decoder_layers or c.num_layers)
    cross = dec_cfg.num_layers * (2 * 4 * d * w + 2 * 2 * s * w)
    return 3.0 * (s * c.flops_per_token(s) + t * (dec_cfg.flops_per_token(t) + cross
                                                  + 2 * d * c.vocab_size))

  def load_pretrained_params(self, path: str, template):
    from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
    params = checkpoint.load_task_params(path, "translation", "a translation", "")
    params = checkpoint.pad_vocab_rows(params, template)
    checkpoint.check_compatible(params, template, path)
    return jax.tree_util.tree_map(jnp.asarray, params)

  # ------------------------------------------------------------- evaluation
  def predict_outputs(self, out, batch) -> dict:
    w = self._token_weights(batch)
    logits, tgt = out["logits"], batch["tgt_ids"]
    nll = jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, tgt[..., None], -1)[..., 0]
    rows = {"feature_index": batch["feature_index"], "nll": jnp.sum(nll * w, -1),
            "correct": jnp.sum((jnp.argmax(logits, -1) == tgt) * w, -1),
            "tokens": jnp.sum(w, -1)}
    if "hyp" in out:
      rows["hyp"] = out["hyp"]
    return rows

  def host_metrics(self, outputs) -> dict:
    keep = outputs["feature_index"] >= 0
    order = np.argsort(outputs["feature_index"][keep], kind="stable")
    rows = {k: np.asarray(v)[keep][order] for k, v in outputs.items()}
    n = max(float(rows["tokens"].sum()), 1e-9)
    result = {"token_accuracy": rows["correct"].sum() / n, "nll": rows["nll"].sum() / n}
    result["perplexity"] = float(np.exp(min(result["nll"], 30.0)))
    # Every teacher-forced argmax right (</s> included) means greedy search reproduces
    # the reference exactly: a lower bound of greedy exact match that needs no search.
    result["forced_exact"] = float(np.mean(rows["correct"] == rows["tokens"]))
    if "hyp" in rows:
      refs = [self.eval_source.references[i] for i in rows["feature_index"]]
      scores = metrics_lib.corpus_scores(data.decode(self.tokenizer, rows["hyp"]), refs)
      if not getattr(self, "_signature_logged", False):
        log(f"translation eval: sacreBLEU {scores['signature']}")
        self._signature_logged = True
      result.update({k: v for k, v in scores.items() if k != "signature"})
    return result

  # ---------------------------------------------------- predict (translate CLI)
  def read_input(self, path: str):
    from bert_jax.tasks.translation import cli_io  # pylint: disable=g-import-not-at-top
    return cli_io.read_sources(self, path)

  def predict_batches(self, features: dict, batch_size: int):
    return self._eval_batches(batch_lib.SourceRows(features, self.max_target), batch_size,
                              0, 1)

  def prediction_records(self, examples, features, outputs):
    from bert_jax.tasks.translation import cli_io  # pylint: disable=g-import-not-at-top
    return cli_io.records(self, examples, features, outputs)
