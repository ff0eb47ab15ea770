"""Input and output of `python -m bert_jax.translate`: one sentence per line, line i of
the output is the translation of line i of the input.

Bad input is counted, never fatal: an empty line gives an empty output line
(`empty_line`), a source longer than data.max_source_length - 1 subwords is cut
(`truncated`, counted per sentence), undecodable UTF-8 bytes become U+FFFD
(`non_utf8_replaced`).
"""
from __future__ import annotations

import os
import sys

import numpy as np

from bert_jax.tasks.skiplog import SkipLog
from bert_jax.tasks.translation import data


def read_lines(path: str, log: SkipLog) -> list[str]:
  """Lines of `path` ("-": stdin) as str, invalid UTF-8 replaced and counted."""
  if path == "-":
    return data.decode_lines(sys.stdin.buffer.read(), "<stdin>", log)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"--input {path} does not exist.")
  return data._lines(path, log)  # pylint: disable=protected-access


def read_sources(task, path: str):
  """(lines, features): features["src_ids"] [N, S] of the non-empty lines and
  features["line"] [N] their line numbers (0-based); features["log"] the SkipLog."""
  log = SkipLog("<stdin>" if path == "-" else path)
  lines = read_lines(path, log)
  keep = []
  for i, line in enumerate(lines):
    if line.strip():
      keep.append(i)
    else:
      log.skip("empty_line", f"line {i + 1}", "an empty output line is written for it")
  src = data.encode(task.tokenizer, [lines[i].strip() for i in keep], task.max_source, log,
                    where=[f"line {i + 1}" for i in keep])
  log.kept = len(keep)
  return lines, {"src_ids": src, "line": np.asarray(keep, np.int64), "log": log}


def records(task, lines, features, outputs):
  """One {"line", "source", "translation"} dict per input line, empty lines included."""
  translations = [""] * len(lines)
  keep = outputs["feature_index"] >= 0
  index = outputs["feature_index"][keep]
  texts = data.decode(task.tokenizer, np.asarray(outputs["hyp"])[keep])
  for i, text in zip(index, texts):
    translations[int(features["line"][i])] = text
  for i, (line, text) in enumerate(zip(lines, translations)):
    yield {"line": i + 1, "source": line, "translation": text}
