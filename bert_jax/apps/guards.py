"""The settings that could destroy what is already on disk, checked in one place, before
a run writes its first byte.

`python -m bert_jax.main` calls `check_run(config, workdir)` right after parsing. Each
refusal is a ValueError of one line naming the field and what it would have destroyed:

* train.keep_checkpoints below 1: orbax's LatestN(0) deletes every checkpoint of the run;
* log, eval and checkpoint intervals out of range (the trainer's own count checks:
  train/loop.py's for the shared loop, word2vec/train.py's for word2vec);
* an output path equal to, or inside, a path the run reads: the workdir over its
  `init_from` model or its data files, `predict.output_file` over `predict.input_file`.

The trainers keep their own checks for callers that skip main (library use); this module
only gathers them so that nothing is prepared or written before the first one fails.
"""
from __future__ import annotations

import os

from bert_jax.runtime import paths

# Config fields a run reads (never writes): an output may not be or hold any of them.
INPUT_FIELDS = ("init_from", "data.train_file", "data.eval_file", "data.test_file",
                "data.vocab_path", "data.vocab", "data.text_glob",
                "predict.input_file")


def field(config, key: str):
  """config's value at a dotted key, or None where a section or the field is missing."""
  value = config
  for part in key.split("."):
    value = value.get(part) if hasattr(value, "get") else None
  return value


def _normalized(path: str) -> str:
  """A comparable form: an object-store URL without a trailing slash, a local path made
  absolute with symlinks resolved (two spellings of one directory compare equal)."""
  path = str(path)
  if paths.is_remote(path):
    return path.rstrip("/")
  return os.path.realpath(os.path.expanduser(path))


def covers(output: str, source: str) -> bool:
  """True when writing `output` (a file, or a directory the run writes into) could
  overwrite `source`: the same path, or `source` inside the `output` directory."""
  out, src = _normalized(output), _normalized(source)
  return src == out or src.startswith(out.rstrip("/") + "/")


def inputs(config) -> list[tuple[str, str]]:
  """(field, path) of every input path the config sets; comma lists (translation's
  "x.src,x.tgt") give one entry a path."""
  found = []
  for key in INPUT_FIELDS:
    value = field(config, key)
    if isinstance(value, str) and value:
      found += [(key, p) for p in value.split(",") if p]
  return found


def check_outputs(config, workdir: str) -> None:
  """A ValueError when the workdir or predict.output_file is, or holds, an input."""
  outputs = [("--workdir", workdir)] if workdir else []
  out_file = field(config, "predict.output_file")
  if config.get("mode", "train") == "predict" and out_file:
    outputs.append(("config.predict.output_file", out_file))
  for out_name, out_path in outputs:
    for in_key, in_path in inputs(config):
      if out_name == "--workdir" and in_key == "predict.input_file":
        continue  # predict reads a file anywhere and writes only its own output file
      if covers(out_path, in_path):
        how = "is" if _normalized(out_path) == _normalized(in_path) else "holds"
        raise ValueError(f"{out_name} {out_path} {how} config.{in_key} {in_path}: the run "
                         "would write over what it reads; give another output path.")


def check_intervals(config) -> None:
  """The trainer's count checks (intervals, steps, learning rate), before any data."""
  if config.get("task") == "word2vec":
    from bert_jax.word2vec import train  # pylint: disable=g-import-not-at-top
    train.check_counts(config)
  elif "train" in config:
    from bert_jax.train import loop  # pylint: disable=g-import-not-at-top
    loop.check_counts(config.train)


def check_run(config, workdir: str) -> None:
  """Every check above, in the order a user would fix them; the first failure raises."""
  from bert_jax.checkpoint import manager  # pylint: disable=g-import-not-at-top
  keep = field(config, "train.keep_checkpoints")
  manager.check_keep(1 if keep is None else keep)
  if config.get("mode", "train") == "train":
    check_intervals(config)
  check_outputs(config, workdir)
