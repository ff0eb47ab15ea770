"""Classification data: CSV / TSV / JSONL files, the embedded polarity set, glue/<task>.

  files:    CSV / TSV (header row, or `fieldnames`) and JSONL, columns configurable
  polarity: gensim's pang_lee_polarity.cor (200 sentences), split deterministically
  tfds:     glue/<task> with label names (TensorFlow imported lazily, tasks/finetune/tfds.py)

Every reader returns (examples, SkipLog): malformed lines, empty texts and missing
labels are warned about, counted and skipped; a wrong column name raises at once.
"""
from __future__ import annotations

import importlib.resources
import pathlib
from typing import Optional, Sequence

from bert_jax.tasks.finetune import files, tfds
from bert_jax.tasks.finetune.classification.features import ClassificationExample
from bert_jax.tasks.finetune.classification.glue import get_glue_task
from bert_jax.tasks.skiplog import SkipLog

POLARITY_LABELS = ("neg", "pos")  # label ids 0 and 1


def read_classification_file(
    path,
    text_a_key: str = "sentence",
    text_b_key: Optional[str] = None,
    label_key: Optional[str] = "label",
    file_format: Optional[str] = None,
    fieldnames: Optional[Sequence[str]] = None,
) -> tuple[list[ClassificationExample], SkipLog]:
  """Classification examples from a CSV, TSV or JSONL file.

  Args:
    path: the file; its suffix (.csv, .tsv, .jsonl/.json) gives the format unless
      `file_format` ("csv", "tsv", "jsonl") is passed.
    text_a_key, text_b_key: text columns (text_b_key None for single sentences).
    label_key: label column; None for unlabeled data (labels then None).
    fieldnames: column names for CSV/TSV files without a header row.

  Returns:
    (examples with raw labels, e.g. "1" from CSV: `featurize_classification` maps them
    through the label list; SkipLog). Skip reasons: malformed_line, non_utf8,
    missing_field, wrong_type, empty_text, missing_label.
  """
  path = pathlib.Path(path)
  file_format = file_format or {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl",
                                ".json": "jsonl"}.get(path.suffix.lower())
  if file_format not in ("csv", "tsv", "jsonl"):
    raise ValueError(f"Unknown format for {path}; pass file_format='csv'|'tsv'|'jsonl'.")
  keys = [k for k in (text_a_key, text_b_key, label_key) if k]
  log = SkipLog(str(path))
  examples = []
  # The columns by name, as the config names them: the message a file without them gets.
  fix = (f"this file needs the columns {','.join(keys)} (name yours with "
         "--config.data.text_a_key, text_b_key and label_key)")
  for n, record in files.rows(path, file_format, fieldnames, log, required=keys, fix=fix):
    where = f"line {n}"
    missing = [k for k in keys if k not in record]
    if missing:
      log.skip("missing_field", where, f"no {missing}")
      continue
    # JSONL may hold lists/objects: not a text, and an unhashable label for the label map.
    wrong = [k for k in keys if record[k] is not None
             and not isinstance(record[k], (str, int, float))]
    if wrong:
      log.skip("wrong_type", where, f"{wrong} must be strings or numbers")
      continue
    if files.blank(record[text_a_key]) or (text_b_key and files.blank(record[text_b_key])):
      log.skip("empty_text", where)
      continue
    if label_key and files.blank(record[label_key]):
      log.skip("missing_label", where)
      continue
    examples.append(ClassificationExample(
        text_a=str(record[text_a_key]),
        text_b=str(record[text_b_key]) if text_b_key else None,
        label=record[label_key] if label_key else None,
        guid=f"{path.name}:{n}"))
  log.kept = len(examples)
  return examples, log


def load_polarity(split: str = "train") -> tuple[list[ClassificationExample], SkipLog]:
  """The offline sentiment set: 200 sentences (Pang & Lee) shipped with gensim.

  Lines are `__label__neg text` / `__label__pos text` (fastText format, cp1252: em
  dashes and accents are single bytes). Labels are "neg"/"pos" (POLARITY_LABELS).
  The split is by line number, so it is deterministic and class-balanced:
  i % 10 in 0..7 -> "train" (160), 8 -> "validation" (20), 9 -> "test" (20);
  "heldout" = validation + test (40); "all".
  """
  splits = {"train": range(8), "validation": (8,), "test": (9,), "heldout": (8, 9),
            "all": range(10)}
  if split not in splits:
    raise ValueError(f"Unknown split {split!r}; one of {sorted(splits)}.")
  path = importlib.resources.files("gensim") / "test" / "test_data" / "pang_lee_polarity.cor"
  log = SkipLog(f"pang_lee_polarity:{split}")
  examples = []
  lines = path.read_bytes().decode("cp1252").splitlines()
  for i, line in enumerate(lines):
    if i % 10 not in splits[split]:
      continue
    prefix, _, text = line.partition(" ")
    label = prefix[len("__label__"):] if prefix.startswith("__label__") else None
    if label not in POLARITY_LABELS:
      log.skip("malformed_line", f"line {i + 1}", f"label prefix {prefix!r}")
    elif not text.strip():
      log.skip("empty_text", f"line {i + 1}")
    else:
      examples.append(ClassificationExample(text.strip(), None, label, f"polarity:{i + 1}"))
  log.kept = len(examples)
  return examples, log


def load_glue(task: str, split: str, data_dir: Optional[str] = None,
              download: bool = True) -> tuple[list[ClassificationExample], SkipLog]:
  """Examples of `glue/<task>` with label NAMES (floats for stsb), ready for
  `featurize_classification(..., label_list=task.label_names)`.

  Test splits have hidden labels (-1 in tfds): their examples carry label None.
  Skip reasons: empty_text, label_not_in_label_list.
  """
  t = get_glue_task(task)
  records, _ = tfds.load(t.tfds_name, split, data_dir, download)
  hidden = split.startswith("test")
  log = SkipLog(f"{t.tfds_name}:{split}")
  examples = []
  for n, record in enumerate(records):
    where = f"idx {int(record.get('idx', n))}"
    texts = [tfds.text(record[k]) for k in t.text_keys]
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
