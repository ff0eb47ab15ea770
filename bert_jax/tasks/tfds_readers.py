"""Fine-tuning data from the tfds catalog: glue/<task>, conll2003, squad/v1.1, squad/v2.0.

These builders import TensorFlow (the optional `tf` extra), so TensorFlow is only
imported inside the functions here; nothing else in bert_jax.tasks needs it. Records
are iterated with `tfds.as_numpy` and converted into the same example classes and
checks as the file readers, so every skip lands in the returned SkipLog.
"""
from __future__ import annotations

from typing import Optional

from bert_jax.tasks.classification import ClassificationExample
from bert_jax.tasks.glue import get_glue_task
from bert_jax.tasks.ner import NerExample
from bert_jax.tasks.readers import squad_example
from bert_jax.tasks.skiplog import SkipLog

# tfds conll2003 `ner` ClassLabel names (tensorflow_datasets/core/dataset_builders/conll/
# conll_dataset_builder_utils.py NER_TAGS); the reader uses the builder's own names.
CONLL2003_NER_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC",
                      "B-MISC", "I-MISC")
CONLL2003_SPLITS = ("train", "dev", "test")  # note "dev", not "validation"


def _tfds():
  """tensorflow_datasets, imported on first use (it pulls TensorFlow for these)."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  return tfds


def _text(value) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _load(name: str, split: str, data_dir: Optional[str], download: bool):
  tfds = _tfds()
  ds, info = tfds.load(name, split=split, data_dir=data_dir, download=download,
                       with_info=True, shuffle_files=False)
  return tfds.as_numpy(ds), info


def load_glue(task: str, split: str, data_dir: Optional[str] = None,
              download: bool = True) -> tuple[list[ClassificationExample], SkipLog]:
  """Examples of `glue/<task>` with label NAMES (floats for stsb), ready for
  `featurize_classification(..., label_list=task.label_names)`.

  Test splits have hidden labels (-1 in tfds): their examples carry label None.
  Skip reasons: empty_text, label_not_in_label_list.
  """
  t = get_glue_task(task)
  records, _ = _load(t.tfds_name, split, data_dir, download)
  hidden = split.startswith("test")
  log = SkipLog(f"{t.tfds_name}:{split}")
  examples = []
  for n, record in enumerate(records):
    where = f"idx {int(record.get('idx', n))}"
    texts = [_text(record[k]) for k in t.text_keys]
    if any(not s.strip() for s in texts):
      log.skip("empty_text", where)
      continue
    raw = record["label"]
    if hidden:
      label = None
    elif t.is_regression:
      label = float(raw)
    elif 0 <= int(raw) < t.num_labels:
      label = t.label_names[int(raw)]
    else:
      log.skip("label_not_in_label_list", where, f"label id {int(raw)}")
      continue
    examples.append(ClassificationExample(texts[0], texts[1] if len(texts) > 1 else None,
                                          label, f"{t.tfds_name}:{split}:{where}"))
  log.kept = len(examples)
  return examples, log


def load_conll2003(split: str, data_dir: Optional[str] = None,
                   download: bool = True) -> tuple[list[NerExample], SkipLog]:
  """conll2003 sentences (`tokens` + `ner` tags as names); splits train/dev/test.

  Skip reasons: empty_text, tags_length_mismatch, label_not_in_label_list.
  """
  records, info = _load("conll2003", split, data_dir, download)
  names = info.features["ner"].feature.names
  log = SkipLog(f"conll2003:{split}")
  examples = []
  for n, record in enumerate(records):
    words = [_text(w) for w in record["tokens"]]
    ids = [int(i) for i in record["ner"]]
    if not words:
      log.skip("empty_text", n)
    elif len(ids) != len(words):
      log.skip("tags_length_mismatch", n, f"{len(words)} tokens, {len(ids)} ner tags")
    elif any(not 0 <= i < len(names) for i in ids):
      log.skip("label_not_in_label_list", n, f"ner ids {ids}")
    else:
      examples.append(NerExample(words, [names[i] for i in ids], f"conll2003:{split}:{n}"))
  log.kept = len(examples)
  return examples, log


def load_squad(version: str = "v1.1", split: str = "validation",
               data_dir: Optional[str] = None, download: bool = True):
  """SquadExamples of `squad/v1.1` or `squad/v2.0` (splits train/validation).

  Same checks as `readers.read_squad_json`: malformed_answers, empty_text,
  missing_label, duplicate_id skipped; answer_text_mismatch noted.
  """
  if version not in ("v1.1", "v2.0"):
    raise ValueError(f"SQuAD version must be 'v1.1' or 'v2.0', got {version!r}.")
  records, _ = _load(f"squad/{version}", split, data_dir, download)
  log = SkipLog(f"squad/{version}:{split}")
  examples, seen = [], set()
  for n, record in enumerate(records):
    answers = record["answers"]
    flat = {
        "id": _text(record["id"]),
        "title": _text(record.get("title", b"")),
        "question": _text(record["question"]),
        "context": _text(record["context"]),
        "answers": {"text": [_text(a) for a in answers["text"]],
                    "answer_start": [int(s) for s in answers["answer_start"]]},
        "is_impossible": bool(record.get("is_impossible", False)),
    }
    ex = squad_example(flat, log, n)
    if ex is not None and ex.qid in seen:
      log.skip("duplicate_id", ex.qid, "predictions are keyed by question id")
    elif ex is not None:
      seen.add(ex.qid)
      examples.append(ex)
  log.kept = len(examples)
  return examples, log
