"""What the fine-tuning readers share: rows of a JSONL / CSV / TSV file, blank values.

Each family's data.py (classification/, ner/, squad/) reads its own records with these;
a malformed line is counted in the SkipLog, a wrong column name raises at once.
"""
from __future__ import annotations

import csv
import json
import pathlib
from typing import Iterable, Sequence

from bert_jax.tasks.skiplog import SkipLog


def blank(value) -> bool:
  return value is None or (isinstance(value, str) and not value.strip())


def rows(path: pathlib.Path, file_format: str, fieldnames, log: SkipLog,
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
