"""NER data: JSONL and CoNLL column files, unlabeled predict input, tfds conll2003.

Every reader returns (examples, SkipLog); bad sentences are counted and skipped.
"""
from __future__ import annotations

import pathlib
from typing import Optional, Sequence

from bert_jax.tasks.finetune import files, tfds
from bert_jax.tasks.finetune.ner.features import NerExample
from bert_jax.tasks.skiplog import SkipLog

# tfds conll2003 `ner` ClassLabel names (tensorflow_datasets/core/dataset_builders/conll/
# conll_dataset_builder_utils.py NER_TAGS); the reader uses the builder's own names.
CONLL2003_NER_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC",
                      "B-MISC", "I-MISC")
CONLL2003_SPLITS = ("train", "dev", "test")  # note "dev", not "validation"



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
  for n, record in files.rows(path, "jsonl", None, log):
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
  one sentence per line split on whitespace. Skip reasons: empty_text (blank lines),
  non_utf8."""
  if str(path).endswith((".jsonl", ".json")):
    return read_ner_jsonl(path, tags_key=None)
  path = pathlib.Path(path)
  log = SkipLog(str(path))
  examples = []
  for n, line in enumerate(path.read_bytes().splitlines(), 1):
    try:
      line = line.decode("utf-8")
    except UnicodeDecodeError:
      log.skip("non_utf8", f"line {n}")
      continue
    if line.strip():
      examples.append(NerExample(line.split(), None, f"{path.name}:{n}"))
    else:
      log.skip("empty_text", f"line {n}")
  log.kept = len(examples)
  return examples, log


def read_conll_file(path, tag_column: int = -1) -> tuple[list[NerExample], SkipLog]:
  """CoNLL column files (word first, tag in `tag_column`); blank lines end sentences,
  -DOCSTART- lines are dropped. Skip reasons: malformed_line (a sentence with a line
  of fewer columns is dropped whole, since its tags would shift), non_utf8 (likewise)."""
  path = pathlib.Path(path)
  log = SkipLog(str(path))
  examples, words, tags, bad, start = [], [], [], False, 1

  def flush():
    if words and not bad:
      examples.append(NerExample(list(words), list(tags), f"{path.name}:{start}"))

  # surrogateescape: a non-UTF-8 byte drops its sentence (counted), not the whole file.
  with open(path, encoding="utf-8", errors="surrogateescape") as f:
    for n, line in enumerate(f, start=1):
      cols = line.split()
      if not cols or cols[0] == "-DOCSTART-":
        flush()
        words, tags, bad, start = [], [], False, n + 1
        continue
      if files.undecodable([line]):
        if not bad:
          log.skip("non_utf8", f"line {n}")
        bad = True
        continue
      if len(cols) < 2 or not -len(cols) <= tag_column < len(cols):
        if not bad:
          log.skip("malformed_line", f"line {n}",
                   f"{len(cols)} column(s), tag column {tag_column}: {line.strip()[:80]!r}")
        bad = True
        continue
      words.append(cols[0])
      tags.append(cols[tag_column])
  flush()
  log.kept = len(examples)
  return examples, log


def load_conll2003(split: str, data_dir: Optional[str] = None,
                   download: bool = True) -> tuple[list[NerExample], SkipLog]:
  """conll2003 sentences (`tokens` + `ner` tags as names); splits train/dev/test.

  Skip reasons: empty_text, tags_length_mismatch, label_not_in_label_list.
  """
  records, info = tfds.load("conll2003", split, data_dir, download)
  names = info.features["ner"].feature.names
  log = SkipLog(f"conll2003:{split}")
  examples = []
  for n, record in enumerate(records):
    words = [tfds.text(w) for w in record["tokens"]]
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
