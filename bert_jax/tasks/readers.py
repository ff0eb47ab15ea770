"""Readers for users' own fine-tuning data and the embedded sentiment set (no tfds).

  classification: CSV / TSV (header row, or `fieldnames`) and JSONL, columns configurable
  NER:            JSONL ({"tokens": [...], "tags": [...]}) and CoNLL column files
  QA:             SQuAD-format JSON (v1.1 and v2.0)
  sentiment:      gensim's pang_lee_polarity.cor, split deterministically

Every reader returns (examples, SkipLog): malformed lines, empty texts, missing labels
and answers not found in their context are warned about, counted and skipped; a
wrong column name is a configuration error and raises at once.
"""
from __future__ import annotations

import csv
import importlib.resources
import json
import pathlib
from typing import Iterable, Optional, Sequence

from bert_jax.tasks.classification import ClassificationExample
from bert_jax.tasks.ner import NerExample
from bert_jax.tasks.skiplog import SkipLog
from bert_jax.tasks.squad import Answer, SquadExample, answer_matches

POLARITY_LABELS = ("neg", "pos")  # label ids 0 and 1


def _blank(value) -> bool:
  return value is None or (isinstance(value, str) and not value.strip())


# ---------------------------------------------------------------- classification
def _rows(path: pathlib.Path, file_format: str, fieldnames, log: SkipLog,
          required: Sequence[str] = ()) -> Iterable:
  """(line number, dict) per record; malformed records are skipped into `log`.

  For CSV/TSV, `required` columns missing from the header raise: that is a wrong
  configuration, not a bad line.
  """
  with open(path, encoding="utf-8", newline="") as f:
    if file_format == "jsonl":
      for n, line in enumerate(f, start=1):
        if not line.strip():
          continue
        try:
          record = json.loads(line)
        except json.JSONDecodeError as e:
          log.skip("malformed_line", f"line {n}", str(e))
          continue
        if not isinstance(record, dict):
          log.skip("malformed_line", f"line {n}", "not a JSON object")
          continue
        yield n, record
      return
    # TSV as GLUE ships it: no quoting, a quote char is just a char.
    kwargs = ({"delimiter": "\t", "quoting": csv.QUOTE_NONE} if file_format == "tsv" else {})
    reader = csv.DictReader(f, fieldnames=fieldnames, **kwargs)
    header = reader.fieldnames or []
    if set(required) - set(header):
      raise ValueError(f"{path}: columns {sorted(set(required) - set(header))} not in the "
                       f"header {header}; set the *_key arguments or fieldnames.")
    for record in reader:
      n = reader.line_num
      if None in record or any(v is None for v in record.values()):
        log.skip("malformed_line", f"line {n}",
                 f"expected {len(reader.fieldnames)} fields")
        continue
      yield n, record


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
    through the label list; SkipLog). Skip reasons: malformed_line, missing_field,
    empty_text, missing_label.
  """
  path = pathlib.Path(path)
  file_format = file_format or {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl",
                                ".json": "jsonl"}.get(path.suffix.lower())
  if file_format not in ("csv", "tsv", "jsonl"):
    raise ValueError(f"Unknown format for {path}; pass file_format='csv'|'tsv'|'jsonl'.")
  keys = [k for k in (text_a_key, text_b_key, label_key) if k]
  log = SkipLog(str(path))
  examples = []
  for n, record in _rows(path, file_format, fieldnames, log, required=keys):
    where = f"line {n}"
    missing = [k for k in keys if k not in record]
    if missing:
      log.skip("missing_field", where, f"no {missing}")
      continue
    if _blank(record[text_a_key]) or (text_b_key and _blank(record[text_b_key])):
      log.skip("empty_text", where)
      continue
    if label_key and _blank(record[label_key]):
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


# --------------------------------------------------------------------------- NER
def _ner_tags(tags, label_list):
  """Tags as strings; int tags are names by position in label_list (or None: bad)."""
  if all(isinstance(t, str) for t in tags):
    return list(tags)
  if label_list is None or not all(isinstance(t, int) and 0 <= t < len(label_list)
                                   for t in tags):
    return None
  return [label_list[t] for t in tags]


def read_ner_jsonl(path, words_key: str = "tokens", tags_key: Optional[str] = "tags",
                   label_list: Optional[Sequence[str]] = None
                   ) -> tuple[list[NerExample], SkipLog]:
  """NER sentences from JSONL: {"tokens": ["EU", "rejects", ...], "tags": ["B-ORG", ...]}.

  Tags may be strings or int ids into `label_list`. `tags_key=None` reads unlabeled
  text. Skip reasons: malformed_line, missing_field, empty_text, missing_label,
  bad_tags, tags_length_mismatch.
  """
  path = pathlib.Path(path)
  log = SkipLog(str(path))
  examples = []
  for n, record in _rows(path, "jsonl", None, log):
    where = f"line {n}"
    words = record.get(words_key)
    if words is None:
      log.skip("missing_field", where, f"no {words_key!r}")
    elif not isinstance(words, list) or not all(isinstance(w, str) for w in words):
      log.skip("malformed_line", where, f"{words_key!r} is not a list of strings")
    elif not words:
      log.skip("empty_text", where)
    elif tags_key and record.get(tags_key) is None:
      log.skip("missing_label", where, f"no {tags_key!r}")
    elif tags_key and (not isinstance(record[tags_key], list)
                       or _ner_tags(record[tags_key], label_list) is None):
      log.skip("bad_tags", where, f"{tags_key!r} must be tag strings or ids in label_list")
    elif tags_key and len(record[tags_key]) != len(words):
      log.skip("tags_length_mismatch", where,
               f"{len(words)} words, {len(record[tags_key])} tags")
    else:
      tags = _ner_tags(record[tags_key], label_list) if tags_key else None
      examples.append(NerExample(words, tags, f"{path.name}:{n}"))
  log.kept = len(examples)
  return examples, log


def read_ner_input(path) -> tuple[list[NerExample], SkipLog]:
  """Unlabeled NER input: JSONL of {"tokens": [...]} (.jsonl/.json), else plain text with
  one sentence per line split on whitespace. Skip reason: empty_text (blank lines)."""
  if str(path).endswith((".jsonl", ".json")):
    return read_ner_jsonl(path, tags_key=None)
  path = pathlib.Path(path)
  log = SkipLog(str(path))
  examples = []
  for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
    if line.strip():
      examples.append(NerExample(line.split(), None, f"{path.name}:{n}"))
    else:
      log.skip("empty_text", f"line {n}")
  log.kept = len(examples)
  return examples, log


def read_conll_file(path, tag_column: int = -1) -> tuple[list[NerExample], SkipLog]:
  """CoNLL column files (word first, tag in `tag_column`); blank lines end sentences,
  -DOCSTART- lines are dropped. Skip reason: malformed_line (a sentence with a line
  of fewer columns is dropped whole, since its tags would shift)."""
  path = pathlib.Path(path)
  log = SkipLog(str(path))
  examples, words, tags, bad, start = [], [], [], False, 1

  def flush():
    if words and not bad:
      examples.append(NerExample(list(words), list(tags), f"{path.name}:{start}"))

  with open(path, encoding="utf-8") as f:
    for n, line in enumerate(f, start=1):
      cols = line.split()
      if not cols or cols[0] == "-DOCSTART-":
        flush()
        words, tags, bad, start = [], [], False, n + 1
        continue
      if len(cols) < 2:
        if not bad:
          log.skip("malformed_line", f"line {n}", f"{len(cols)} column(s): {line.strip()!r}")
        bad = True
        continue
      words.append(cols[0])
      tags.append(cols[tag_column])
  flush()
  log.kept = len(examples)
  return examples, log


# ---------------------------------------------------------------------------- QA
def squad_example(record: dict, log: SkipLog, where) -> Optional[SquadExample]:
  """One question from a flat record {id, question, context, answers: {text: [..],
  answer_start: [..]} or [{text, answer_start}, ..], is_impossible?, title?}; None if
  skipped. Shared by the JSON and tfds readers.

  Answers whose text is not at their answer_start are kept (their text still counts as
  gold for EM/F1) and noted; training uses the first aligned one (featurize_squad).
  """
  qid = str(record.get("id", where))
  question, context = record.get("question"), record.get("context")
  if not isinstance(question, str) or not isinstance(context, str):
    log.skip("malformed_record", qid, "question/context missing")
    return None
  if not question.strip() or not context.strip():
    log.skip("empty_text", qid)
    return None
  raw = record.get("answers") or []
  if isinstance(raw, dict):  # tfds layout: parallel lists
    texts, starts = list(raw.get("text", [])), list(raw.get("answer_start", []))
  else:
    texts = [a.get("text") if isinstance(a, dict) else None for a in raw]
    starts = [a.get("answer_start") if isinstance(a, dict) else None for a in raw]
  if len(texts) != len(starts) or not all(
      isinstance(t, str) and isinstance(s, int) for t, s in zip(texts, starts)):
    log.skip("malformed_answers", qid, f"{len(texts)} texts, {len(starts)} starts")
    return None
  answers = tuple(Answer(t, s) for t, s in zip(texts, starts))
  is_impossible = bool(record.get("is_impossible", False))
  if not is_impossible and not answers:
    log.skip("missing_label", qid, "answerable question without answers")
    return None
  if any(not answer_matches(context, a) for a in answers):
    log.note("answer_text_mismatch", qid, "an answer text is not at its answer_start")
  return SquadExample(qid, question, context, answers, is_impossible,
                      str(record.get("title", "")))


def read_squad_json(path) -> tuple[list[SquadExample], SkipLog]:
  """Examples from a SQuAD v1.1/v2.0 JSON file ({"data": [{"paragraphs": ...}]})."""
  path = pathlib.Path(path)
  log = SkipLog(str(path))
  with open(path, encoding="utf-8") as f:
    try:
      data = json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path} is not valid JSON: {e}") from e
  if not isinstance(data, dict) or not isinstance(data.get("data"), list):
    raise ValueError(f"{path} lacks the SQuAD top-level {{'data': [...]}} list.")
  examples, seen = [], set()
  for a, article in enumerate(data["data"]):
    paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
    for p, paragraph in enumerate(paragraphs if isinstance(paragraphs, list) else [None]):
      if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
        log.skip("malformed_record", f"data[{a}].paragraphs[{p}]", "no qas list")
        continue
      for q, qa in enumerate(paragraph["qas"]):
        if not isinstance(qa, dict):
          log.skip("malformed_record", f"data[{a}].paragraphs[{p}].qas[{q}]")
          continue
        record = dict(qa, context=paragraph.get("context"), title=article.get("title", ""))
        ex = squad_example(record, log, f"data[{a}].paragraphs[{p}].qas[{q}]")
        if ex is not None and ex.qid in seen:
          log.skip("duplicate_id", ex.qid, "predictions are keyed by question id")
        elif ex is not None:
          seen.add(ex.qid)
          examples.append(ex)
  log.kept = len(examples)
  return examples, log


def squad_gold_answers(examples: Sequence[SquadExample]) -> dict[str, list[str]]:
  """qid -> gold answer texts, the input of squad_metrics.squad_v1/v2_scores."""
  return {ex.qid: [a.text for a in ex.answers] for ex in examples}
