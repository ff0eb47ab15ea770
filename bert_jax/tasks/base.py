"""The Task contract: what the shared loop (bert_jax/train/loop.py) and steps rely on.

A task owns its model, its data and its loss and metric terms; the steps in
bert_jax/train/steps.py own the mechanics (rng, gradient accumulation, the optimizer
update, the non-finite guard) and the loop owns the run (mesh, sharded state,
restore-or-init, logging, eval, checkpoints). `registry.py` builds the task from the
config and hands it to `train_and_evaluate(config, workdir, task)`; train/ never
imports tasks/, so these Protocols are the whole interface, checked structurally
(tests/tasks/test_base.py checks every registered task against them).

Shapes: B = batch rows (global inside jit, per process in iterators), L = sequence
length, P = prediction slots of a row (MLM positions; 0 where a task has none).
A "phase" is one entry of `config.train.phases` (a dict; {} when there are none).
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional, Protocol, Sequence, runtime_checkable

import jax
import numpy as np

from bert_jax.layers.config import TransformerConfig

Batch = Mapping[str, Any]       # name -> [B, ...] array (numpy on the host, jax in jit)
Params = Any                    # a params pytree (unboxed)


@runtime_checkable
class Task(Protocol):
  """A model, its data and its loss/metric terms, trained by the shared loop."""

  name: str                     # config.task; saved in every checkpoint's meta
  model_config: TransformerConfig  # saved in the meta; its flops_per_token feeds MFU
  tokenizer_dir: Optional[str]  # saved in the meta (set by prepare); None if none
  host_scored: bool             # True: a HostScored task (eval = predict_outputs + host_metrics)
  summary_keys: tuple[str, ...]  # train metrics of the final "summary: k first -> last" line
  progress_labels: tuple[tuple[str, str], ...]  # (metric, short label) on the progress line

  def prepare(self, workdir: str) -> None:
    """Builds or reuses the data (every process calls it) before any iterator is made."""

  def steps_per_epoch(self, batch_size: int) -> int:
    """Optimizer steps of one pass over the train data at global `batch_size` rows."""

  def phase_shapes(self, phase: dict) -> dict:
    """{"seq_len": L, "num_predictions": P} of the batches of `phase`."""

  def train_iterator(self, phase: dict, batch_size: int, shard_index: int,
                     shard_count: int, seed: int) -> Iterator[Batch]:
    """Endless checkpointable (grain) iterator of this process's [batch_size, ...] numpy dicts."""

  def eval_iterator(self, phase: dict, batch_size: int, shard_index: int,
                    shard_count: int) -> Iterator[Batch]:
    """Finite iterator over the eval split, every example once, padding rows weighted 0."""

  def dummy_batch(self, batch_size: int, seq_len: int, num_predictions: int) -> Batch:
    """A [batch_size, seq_len] (and [batch_size, num_predictions]) batch for init/eval_shape."""

  def init(self, rng: jax.Array, batch: Batch) -> dict:
    """Flax variables {"params": boxed params with logical axis names} for `batch`'s shapes."""

  def apply(self, params: Params, batch: Batch, rng: Optional[jax.Array], train: bool) -> dict:
    """Model outputs of a [B, ...] batch (dropout from rng when train; rng None otherwise)."""

  def loss_weights(self, batch: Batch) -> dict:
    """{loss part: [] total weight of the whole batch}; each part's sum is divided by it."""

  def loss_parts(self, out: dict, batch: Batch) -> dict:
    """{loss part: [] weighted sum over the (micro)batch}; the loss is Σ part / weight."""

  def metric_sums(self, out: dict, batch: Batch) -> dict:
    """{name: [] numerator or denominator}, summed over batches before metric_ratios."""

  def metric_ratios(self, sums: dict) -> dict:
    """{metric: []} from summed metric_sums (e.g. accuracy = correct / weight)."""

  def flops_per_example(self, seq_len: int, num_predictions: int) -> float:
    """Training FLOPs (3x forward) of one [seq_len] example: model_config's + the head's."""

  def load_pretrained_params(self, path: str, template: Params) -> Params:
    """`config.init_from` params shaped like `template` (numpy/jax leaves, unboxed)."""


@runtime_checkable
class HostScored(Task, Protocol):
  """A task scored by official metrics on the host over the whole eval split.

  The loop jits `predict_outputs(apply(params, batch, None, train=False), batch)` over
  the eval iterator, gathers the rows of every process and calls `host_metrics`; the
  best checkpoint is kept by `config.train.best_metric` among its keys. Predict mode
  (tasks/finetune/predict.py) uses the other two members on a user's unlabeled file.
  """

  def predict_outputs(self, out: dict, batch: Batch) -> dict:
    """{name: [B, ...] per-row array} kept for host_metrics (padding rows marked)."""

  def host_metrics(self, outputs: Mapping[str, np.ndarray]) -> dict:
    """{metric: float} from the eval split's predict_outputs, concatenated over batches."""

  def read_input(self, path: str) -> tuple[Sequence, dict]:
    """(examples, features) of an unlabeled input file; bad records counted and skipped."""

  def predict_batches(self, features: dict, batch_size: int) -> Iterator[Batch]:
    """[batch_size, ...] batches covering `features` once (fixed shapes, padding rows)."""

  def prediction_records(self, examples: Sequence, features: dict,
                         outputs: Mapping[str, np.ndarray]) -> Iterator[dict]:
    """One JSON-able dict per example of `examples` that has a prediction."""
