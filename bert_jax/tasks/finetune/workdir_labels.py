"""The label set a fine-tuning run trained its head with, kept in its workdir: labels.json.

Predict mode reads a trained head's labels from here rather than from the training file,
which it is not given (and which may have changed since): the head's outputs are in this
order, and a label set from the data is the file's sorted labels, not the config's.
Written by the first run (process 0, atomically, beside tokenizer/); a rerun with another
label set is refused, as a rerun with another tokenizer is: the workdir's checkpoints
were trained with its own. Tasks without a label set (SQuAD, regression) write none.
"""
from __future__ import annotations

import json
from typing import Optional

from bert_jax.runtime import paths

FILE = "labels.json"


def path(workdir: str) -> str:
  return str(paths.resolve(workdir) / FILE)


def keep_or_write(task, workdir: str) -> None:
  """Writes the task's label list into `workdir` unless it holds that list already; a
  ValueError (one line naming both lists) when it holds another."""
  labels = getattr(task, "label_list", None)
  if labels is None:
    return
  labels = [str(x) for x in labels]
  saved = read(workdir)
  if saved is None:
    paths.write_atomically(path(workdir), json.dumps(
        {"task": task.name, "labels": labels}, ensure_ascii=False, indent=1) + "\n")
  elif list(saved) != labels:
    raise ValueError(f"{path(workdir)} holds the labels {list(saved)}, this run's are "
                     f"{labels}: that workdir's checkpoints were trained with its own; use a "
                     "new --workdir, or give that label set (--config.data.labels).")


def read(workdir: str) -> Optional[tuple]:
  """The saved label list, or None when the workdir has no labels.json (a run from before
  it was written, or a task without labels)."""
  target = paths.resolve(path(workdir))
  if not target.exists():
    return None
  try:
    labels = json.loads(target.read_text(encoding="utf-8"))["labels"]
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"{target} is not a readable label list ({type(e).__name__}): a write "
                     "cut short? Delete it: a rerun of the training writes it again.") from None
  if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
    raise ValueError(f"{target}: 'labels' must be a list of strings.")
  return tuple(labels)
