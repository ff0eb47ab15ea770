"""What the fine-tuning readers share: rows of a JSONL / CSV / TSV file, blank values.

Each family's data.py (classification/, ner/, squad/) reads its own records with these;
a malformed line is counted in the SkipLog, a wrong column name raises at once.
"""
from __future__ import annotations

import csv
import json
import pathlib
import re
from typing import Iterable, Sequence

from bert_jax.tasks.skiplog import SkipLog


def blank(value) -> bool:
  return value is None or (isinstance(value, str) and not value.strip())


# A byte that is not UTF-8, as read with errors="surrogateescape".
_SURROGATE = re.compile("[\udc80-\udcff]")


def undecodable(values) -> bool:
  """True if a str holds bytes that were not UTF-8 (read with errors="surrogateescape")."""
  return any(isinstance(v, str) and _SURROGATE.search(v) for v in values)


def rows(path: pathlib.Path, file_format: str, fieldnames, log: SkipLog,
         required: Sequence[str] = (),
         fix: str = "set the *_key arguments or fieldnames") -> Iterable:
  """(line number, dict) per record; malformed records are skipped into `log`.

  A record with bytes that are not UTF-8 is skipped (non_utf8), not decoded into
  U+FFFD text nobody asked for. For CSV/TSV, `required` columns missing from the header
  raise (`fix` says how to name them): that is a wrong configuration, not a bad line.
  """
  # surrogateescape: a bad byte fails its own record, not the whole file.
  with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
    if file_format == "jsonl":
      for n, line in enumerate(f, start=1):
        if not line.strip():
          continue
        if undecodable([line]):
          log.skip("non_utf8", f"line {n}")
          continue
        try:
          record = json.loads(line)
        except (ValueError, RecursionError) as e:  # also >4300-digit ints, deep nesting
          log.skip("malformed_line", f"line {n}", f"{type(e).__name__}: {str(e)[:200]}")
          continue
        if not isinstance(record, dict):
          log.skip("malformed_line", f"line {n}", "not a JSON object")
          continue
        yield n, record
      return
    # TSV as GLUE ships it: no quoting, a quote char is just a char.
    kwargs = ({"delimiter": "\t", "quoting": csv.QUOTE_NONE} if file_format == "tsv" else {})
    reader = csv.DictReader(f, fieldnames=fieldnames, **kwargs)
    try:
      header = reader.fieldnames or []
    except csv.Error as e:
      raise ValueError(f"{path}: line 1: unreadable header row: {e}") from e
    if set(required) - set(header):
      raise ValueError(f"{path}: columns {sorted(set(required) - set(header))} not in the "
                       f"header {header}; {fix}.")
    while True:
      last = reader.line_num
      try:
        record = next(reader)
      except StopIteration:
        return
      except csv.Error as e:  # a field over csv.field_size_limit(), a stray quote...
        log.skip("malformed_line", f"line {last + 1}", str(e))
        continue
      n = reader.line_num
      if None in record or any(v is None for v in record.values()):
        log.skip("malformed_line", f"line {n}",
                 f"expected {len(reader.fieldnames)} fields")
        continue
      if undecodable(record.values()):
        log.skip("non_utf8", f"line {n}")
        continue
      yield n, record
