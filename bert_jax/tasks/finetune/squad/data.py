"""SQuAD data: SQuAD-format JSON (v1.1 / v2.0) and tfds squad/v1.1, squad/v2.0.

Both go through `squad_example` (one flat record -> SquadExample, or a counted skip)
and `_unique` (question ids are the predictions' keys: a repeated one is skipped).
"""
from __future__ import annotations

import json
import pathlib
from typing import Iterable, Optional, Sequence

from bert_jax.tasks.finetune import tfds
from bert_jax.tasks.skiplog import SkipLog
from bert_jax.tasks.finetune.squad.features import Answer, SquadExample, answer_matches


def squad_example(record: dict, log: SkipLog, where,
                  unlabeled: bool = False) -> Optional[SquadExample]:
  """One question from a flat record {id, question, context, answers: {text: [..],
  answer_start: [..]} or [{text, answer_start}, ..], is_impossible?, title?}; None if
  skipped. Shared by the JSON and tfds readers. unlabeled (predict input): a question
  without answers is kept.

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
    texts, starts = raw.get("text", []), raw.get("answer_start", [])
  elif isinstance(raw, (list, tuple)):
    texts = [a.get("text") if isinstance(a, dict) else None for a in raw]
    starts = [a.get("answer_start") if isinstance(a, dict) else None for a in raw]
  else:
    texts, starts = None, None
  # Types checked before use: an answers field of another shape is a counted skip.
  texts = list(texts) if isinstance(texts, (list, tuple)) else [None]
  starts = list(starts) if isinstance(starts, (list, tuple)) else [None]
  if len(texts) != len(starts) or not all(
      isinstance(t, str) and isinstance(s, int) and not isinstance(s, bool)
      for t, s in zip(texts, starts)):
    log.skip("malformed_answers", qid, f"{len(texts)} texts, {len(starts)} starts")
    return None
  answers = tuple(Answer(t, s) for t, s in zip(texts, starts))
  is_impossible = bool(record.get("is_impossible", False))
  if not is_impossible and not answers and not unlabeled:
    log.skip("missing_label", qid, "answerable question without answers")
    return None
  if any(not answer_matches(context, a) for a in answers):
    log.note("answer_text_mismatch", qid, "an answer text is not at its answer_start")
  return SquadExample(qid, question, context, answers, is_impossible,
                      str(record.get("title", "")))


def _unique(records: Iterable[tuple[dict, object]], log: SkipLog,
            unlabeled: bool = False) -> list[SquadExample]:
  """squad_example of each (record, where), a question id seen before skipped."""
  examples, seen = [], set()
  for record, where in records:
    ex = squad_example(record, log, where, unlabeled)
    if ex is not None and ex.qid in seen:
      log.skip("duplicate_id", ex.qid, "predictions are keyed by question id")
    elif ex is not None:
      seen.add(ex.qid)
      examples.append(ex)
  return examples


def read_squad_json(path, unlabeled: bool = False) -> tuple[list[SquadExample], SkipLog]:
  """Examples from a SQuAD v1.1/v2.0 JSON file ({"data": [{"paragraphs": ...}]});
  unlabeled (predict input): questions without answers too."""
  path = pathlib.Path(path)
  log = SkipLog(str(path))
  with open(path, "rb") as f:
    try:
      data = json.loads(f.read().decode("utf-8"))
    # ValueError: invalid JSON or UTF-8, a >4300-digit int; RecursionError: deep nesting.
    except (ValueError, RecursionError) as e:
      raise ValueError(f"{path} is not valid UTF-8 JSON: {type(e).__name__}: "
                       f"{str(e)[:200]}") from e
  if not isinstance(data, dict) or not isinstance(data.get("data"), list):
    raise ValueError(f"{path} lacks the SQuAD top-level {{'data': [...]}} list.")
  records = []
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
        records.append((record, f"data[{a}].paragraphs[{p}].qas[{q}]"))
  examples = _unique(records, log, unlabeled)
  log.kept = len(examples)
  return examples, log


def squad_gold_answers(examples: Sequence[SquadExample]) -> dict[str, list[str]]:
  """qid -> gold answer texts, the input of squad_metrics.squad_v1/v2_scores."""
  return {ex.qid: [a.text for a in ex.answers] for ex in examples}


def load_squad(version: str = "v1.1", split: str = "validation",
               data_dir: Optional[str] = None, download: bool = True):
  """SquadExamples of `squad/v1.1` or `squad/v2.0` (splits train/validation).

  Same checks as `readers.read_squad_json`: malformed_answers, empty_text,
  missing_label, duplicate_id skipped; answer_text_mismatch noted.
  """
  if version not in ("v1.1", "v2.0"):
    raise ValueError(f"SQuAD version must be 'v1.1' or 'v2.0', got {version!r}.")
  records, _ = tfds.load(f"squad/{version}", split, data_dir, download)
  log = SkipLog(f"squad/{version}:{split}")
  rows, records = records, []
  for n, record in enumerate(rows):
    answers = record["answers"]
    flat = {
        "id": tfds.text(record["id"]),
        "title": tfds.text(record.get("title", b"")),
        "question": tfds.text(record["question"]),
        "context": tfds.text(record["context"]),
        "answers": {"text": [tfds.text(a) for a in answers["text"]],
                    "answer_start": [int(s) for s in answers["answer_start"]]},
        "is_impossible": bool(record.get("is_impossible", False)),
    }
    records.append((flat, n))
  examples = _unique(records, log)
  log.kept = len(examples)
  return examples, log
