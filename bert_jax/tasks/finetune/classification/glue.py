"""The GLUE task table: tfds text keys, label names (or regression), official metrics.

Text keys and label names are those of the tfds `glue/<task>` builders (checked
against the installed builder in tests/tasks/finetune/test_tfds.py); the metrics are
GLUE's official ones (Wang et al. 2019, table 1). Label ids are positions in
`label_names`, the same as tfds' ClassLabel ids.
"""
from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class GlueTask:
  name: str
  text_keys: tuple[str, ...]  # 1 (single sentence) or 2 (pair) tfds feature names
  label_names: Optional[tuple[str, ...]]  # None: regression (STS-B, scores 0..5)
  metrics: tuple[str, ...]  # keys of metrics.METRIC_FNS; the first is the headline
  eval_splits: tuple[str, ...] = ("validation",)
  test_splits: tuple[str, ...] = ("test",)  # labels hidden (-1) in every GLUE test split

  @property
  def tfds_name(self) -> str:
    return f"glue/{self.name}"

  @property
  def is_regression(self) -> bool:
    return self.label_names is None

  @property
  def num_labels(self) -> int:
    """Output units of the head: 1 for regression."""
    return 1 if self.label_names is None else len(self.label_names)


_NLI3 = ("entailment", "neutral", "contradiction")
GLUE_TASKS = {t.name: t for t in [
    GlueTask("cola", ("sentence",), ("unacceptable", "acceptable"), ("mcc",)),
    GlueTask("sst2", ("sentence",), ("negative", "positive"), ("accuracy",)),
    GlueTask("mrpc", ("sentence1", "sentence2"), ("not_equivalent", "equivalent"),
             ("f1", "accuracy")),
    GlueTask("qqp", ("question1", "question2"), ("not_duplicate", "duplicate"),
             ("f1", "accuracy")),
    GlueTask("stsb", ("sentence1", "sentence2"), None, ("pearson", "spearman")),
    GlueTask("mnli", ("premise", "hypothesis"), _NLI3, ("accuracy",),
             eval_splits=("validation_matched", "validation_mismatched"),
             test_splits=("test_matched", "test_mismatched")),
    GlueTask("qnli", ("question", "sentence"), ("entailment", "not_entailment"),
             ("accuracy",)),
    GlueTask("rte", ("sentence1", "sentence2"), ("entailment", "not_entailment"),
             ("accuracy",)),
    GlueTask("wnli", ("sentence1", "sentence2"), ("not_entailment", "entailment"),
             ("accuracy",)),
]}


def get_glue_task(name: str) -> GlueTask:
  name = name.removeprefix("glue/")
  if name not in GLUE_TASKS:
    raise ValueError(f"Unknown GLUE task {name!r}; one of {sorted(GLUE_TASKS)}.")
  return GLUE_TASKS[name]
