"""JSON-lines files that a killed writer may have cut short (metrics.jsonl, sweep rows)."""
from __future__ import annotations

import json
from typing import Iterator


def rows(path: str) -> Iterator[dict]:
  """The decodable rows of a JSON-lines file, in order; a line cut short (a kill mid-write)
  or otherwise not JSON is skipped."""
  with open(path, encoding="utf-8") as f:
    for line in f:
      try:
        yield json.loads(line)
      except json.JSONDecodeError:
        continue
